package fleet

import (
	"fmt"
	"strings"

	"github.com/bootops/bootops/boot/status"
)

// EventsPerMachine is how many events Provisioning makes per machine.
const EventsPerMachine = 12

// Provisioning is the status events of machine i of a site (site index
// idx, for its MAC) going through a whole provisioning, as the boot plane
// and its agent record them: DHCP, the script, the check-in, four actions
// started and done, provisioned. The machine's node is n%05d.
func Provisioning(site string, idx, i int) []status.Event {
	node := fmt.Sprintf("n%05d", i)
	mac := fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", idx, i>>16, (i>>8)&0xff, i&0xff)
	ev := []status.Event{
		{Kind: status.KindDHCP, Site: site, Node: node, MAC: mac, State: status.StateDiscovered, Message: "dhcp: proxy offer, boot file ipxe"},
		{Kind: status.KindScript, Site: site, Node: node, MAC: mac, State: status.StateBooting, Message: "served the Micro-OS script"},
		{Kind: status.KindAgent, Site: site, Node: node, State: status.StateMicroOS, Seq: 1, Message: "agent checked in"},
	}
	seq := uint64(2)
	for k, a := range strings.Fields("wipe-disk image-to-disk cloud-init reboot") {
		ev = append(ev,
			status.Event{Kind: status.KindAgent, Site: site, Node: node, State: status.StateProvisioning, Action: a, Step: k + 1, Steps: 4, Seq: seq, Message: "started " + a},
			status.Event{Kind: status.KindAgent, Site: site, Node: node, State: status.StateProvisioning, Action: a, Step: k + 1, Steps: 4, Seq: seq + 1, Bytes: 64 << 20, Total: 64 << 20, Rate: 4e7, Message: "done " + a})
		seq += 2
	}
	return append(ev, status.Event{Kind: status.KindAgent, Site: site, Node: node, State: status.StateProvisioned, Seq: seq, Message: "provisioned (generation 0)"})
}
