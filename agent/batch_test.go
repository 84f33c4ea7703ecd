package agent

import (
	"strings"
	"testing"

	"github.com/bootops/bootops/plan"
)

// Batches fit the server's bounds: at most plan.MaxEventBatch events and
// about plan.MaxEventBatchBytes, always at least one event; a message is
// cut to plan.MaxEventMessage when it is queued.
func TestBatchBounds(t *testing.T) {
	small := make([]plan.AgentEvent, 2000)
	if n := batchLen(small); n != plan.MaxEventBatch {
		t.Errorf("%d small events: a batch of %d", len(small), n)
	}
	big := make([]plan.AgentEvent, 100)
	for i := range big {
		big[i].Message = strings.Repeat("x", plan.MaxEventMessage)
	}
	n := batchLen(big)
	if n < 1 || n*plan.MaxEventMessage > plan.MaxEventBatchBytes {
		t.Errorf("8 KiB events: a batch of %d", n)
	}
	if batchLen(big[:1]) != 1 {
		t.Error("a lone event does not go")
	}
	u := &uplink{console: &strings.Builder{}, kick: make(chan struct{}, 1)}
	u.Report(plan.AgentEvent{Type: plan.AgentLog, Message: strings.Repeat("é", plan.MaxEventMessage)})
	if m := u.pending[0].Message; len(m) > plan.MaxEventMessage+64 || !strings.HasSuffix(m, "more bytes]") {
		t.Errorf("a %d-byte message queued as %d bytes", 2*plan.MaxEventMessage, len(m))
	}
}
