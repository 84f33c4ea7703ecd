package dhcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// LeaseRecord is one lease as a lease file keeps it: the address and when
// it expires (zero: a file of the days before expiry, so expired).
type LeaseRecord struct {
	IP      netip.Addr
	Expires time.Time
}

// leaseJSON is a LeaseRecord in the file.
type leaseJSON struct {
	IP      string    `json:"ip"`
	Expires time.Time `json:"expires"`
}

// ReadLeases reads a lease file (the DHCPv4 and DHCPv6 pools share its
// format: a JSON object of key → {ip, expires}); a missing file holds no
// leases. Errors name the file and the key.
func ReadLeases(path string) (map[string]LeaseRecord, error) {
	out := map[string]LeaseRecord{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("leases: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("leases %s: %w", path, err)
	}
	for key, raw := range m {
		var f leaseJSON
		// Files written before leases expired map a key to its address:
		// such a lease counts as expired.
		if err := json.Unmarshal(raw, &f.IP); err != nil {
			if err := json.Unmarshal(raw, &f); err != nil {
				return nil, fmt.Errorf("leases %s: %s: %w", path, key, err)
			}
		}
		a, err := netip.ParseAddr(f.IP)
		if err != nil {
			return nil, fmt.Errorf("leases %s: %s: %w", path, key, err)
		}
		out[key] = LeaseRecord{a, f.Expires}
	}
	return out, nil
}

// WriteLeases writes the lease file atomically (a temporary file renamed
// over it), keys sorted: a stable, readable file.
func WriteLeases(path string, leases map[string]LeaseRecord) error {
	m := make(map[string]leaseJSON, len(leases))
	for key, l := range leases {
		m[key] = leaseJSON{l.IP.String(), l.Expires.UTC()}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
