// Package agentapi is the API the Micro-OS agent and the installed OS
// talk to: the check-in (who the machine is, its TPM's proof, the
// workflow and a session credential), the workflow's events,
// qa-network's download, the swarm's manifests, reports and chunks, and
// the installed OS's report.
//
// Where the line with boot/http runs: what a machine's firmware or boot
// loader fetches before any bootops code runs on it (the iPXE entry and
// per-machine scripts, GRUB's configs, the Micro-OS files, the site
// overlay, the iPXE builds) and what operators read (status, timelines,
// the delivery record) are boot/http's, which mounts this API on its
// listeners (Server.Routes). What a running machine calls, with a
// credential of its own (the boot token its script carried, a session,
// a report credential, a swarm key), is here. The boot token is the one
// thing both sides share: boot/http mints it into a script, the check-in
// spends it.
//
// A check-in is a pipeline of named steps: authenticate → admit →
// decide, which is policy, a pure function of the Plan, the request and
// what the stores said (as plan.Decide is of a Plan and a machine); then
// gate (a newcomer's budget, the TPM's proof, the boot token spent),
// openSession and answer, which spend and write. A refusal at any step is
// one value (refusal) that Server.refuse answers and, when the sender
// proved enough to be heard, puts on the machine's timeline.
package agentapi
