// Package agent is the inside of bootops-agent, the static binary of the
// Micro-OS: it discovers what the machine is (Identity, Disks) and runs the
// node's workflow (Runner), reporting every step as a plan.AgentEvent.
//
// It knows nothing of the agent API's transport: the caller checks in,
// hands the workflow to Runner.Run and numbers, batches and sends the events
// its Reporter receives. Everything that touches the machine (mounting,
// running commands, rebooting) goes through a Runner field, so tests run
// without root against regular files and directories.
package agent
