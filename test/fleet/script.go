package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/bootops/bootops/agent"
)

// ScriptArgs fetches a machine's iPXE script from the boot server, as
// iPXE does, and returns its kernel command line's arguments: a
// simulated machine's agent starts with them (its boot token among them).
func ScriptArgs(ctx context.Context, url string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "kernel "); ok {
			return agent.ParseCmdline(rest), nil
		}
	}
	return nil, fmt.Errorf("no kernel line in the script: %q", b)
}
