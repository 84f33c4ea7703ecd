// Package redfishvm is a Redfish BMC for tests in front of one machine it
// powers: a QEMU VM driven through QMP (QEMU), or a FakeMachine. It
// serves what bmclib reads and does: the service root, the system with
// its power state, Reset action and boot override, the manager with its
// virtual CD (InsertMedia downloads the image and puts it in the VM's CD
// drive, EjectMedia takes it out), sessions and HTTP Basic. Its resources
// are shaped like DMTF's Redfish mockups (testdata/dmtf), and it logs
// every request and what it did, for the tests to read (Saw).
package redfishvm
