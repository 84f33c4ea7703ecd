package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// QA actions: commissioning burn-in the operator puts before
// image-to-disk, each with its limits in Git. A failed one fails the node
// with the value it measured, before anything is written to the disk (but
// by qa-disk with write: true, after a wipe-disk).
const (
	QAMemory  = "qa-memory"
	QACPU     = "qa-cpu"
	QADisk    = "qa-disk"
	QANetwork = "qa-network"
)

// Defaults of the QA actions' parameters.
const (
	DefaultQAShare       = "10%"
	DefaultQADuration    = "10s"
	DefaultQADiskSize    = "256Mi"
	DefaultQANetworkSize = "64Mi"
)

// QAStreamPath is what qa-network downloads from the boot server, with the
// session credential and ?bytes=N&site=…&node=…&machine=…: N bytes (at
// most MaxQAStream) of a pattern, with a Content-Length.
const QAStreamPath = "/api/v1/qa/stream"

// MaxQAStream bounds QAStreamPath's bytes, and so qa-network's size.
const MaxQAStream = 1 << 30

// ParseSize reads a size such as 64Mi, 1Gi or 512Ki (binary units); a
// bare number is bytes.
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	num := s
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: want a positive size such as 256Mi or 1Gi", s)
	}
	return n * mult, nil
}

// ParseShare reads a share such as 10% as a fraction (0.1).
func ParseShare(s string) (float64, error) {
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || !strings.HasSuffix(s, "%") || n < 1 || n > 100 {
		return 0, fmt.Errorf("share %q: want a percentage such as 10%%", s)
	}
	return float64(n) / 100, nil
}

// CommissionActions are the QA actions of wf a held node runs while it
// waits (install: hold): those that write no disk — qa-memory, qa-cpu,
// qa-network, and qa-disk without write — in their order. Whatever else
// the workflow does waits for the release.
func CommissionActions(wf Workflow) []Action {
	var out []Action
	for _, a := range wf.Actions {
		switch a.Action {
		case QAMemory, QACPU, QANetwork:
			out = append(out, a)
		case QADisk:
			if !a.Write {
				out = append(out, a)
			}
		}
	}
	return out
}
