package http

import (
	"net/url"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/plan"
)

// identity is what iPXE reports about itself on the per-machine request.
type identity struct {
	Machine  plan.Machine
	Site     string
	Arch     string
	Platform string
}

// parseIdentity reads the query the entry script makes iPXE send. Values
// iPXE could not fill in come back empty or as junk ("", "00:00:…" for no
// UUID, a firmware's "To Be Filled By O.E.M." serial): those are dropped,
// never guessed at, so they cannot match a node. The agent API's check-in
// goes through the same parsers (boot.ParseUUID, boot.ParseSerial).
func parseIdentity(q url.Values) identity {
	id := identity{
		Site:     boot.Word(q.Get("site"), 63),
		Arch:     boot.Word(q.Get("arch"), 16),
		Platform: boot.Word(q.Get("platform"), 16),
	}
	id.Machine.MAC = plan.NormalizeMAC(q.Get("mac"))
	id.Machine.UUID, _ = boot.ParseUUID(q.Get("uuid"))
	id.Machine.Serial, _ = boot.ParseSerial(q.Get("serial"))
	return id
}
