package power

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

// fakeIpmitool is an ipmitool for a BMC that speaks cipher suite 3 only
// and refuses a boot device ("Invalid data field in request", completion
// code 0xcc), as pyghmi's fake BMC does.
const fakeIpmitool = `#!/bin/sh
suite=""; prev=""
for a in "$@"; do
	[ "$prev" = "-C" ] && suite=$a
	prev=$a
done
if [ "$suite" != 3 ]; then
	echo "Error in open session response message : invalid authentication algorithm"
	echo "Error: Unable to establish IPMI v2 / RMCP+ session"
	exit 1
fi
case "$*" in
*"chassis power status"*) echo "Chassis Power is on" ;;
*"chassis bootdev"*) echo "Set Chassis Boot Parameter 5 failed: Invalid data field in request"; exit 1 ;;
*) echo "Invalid command"; exit 1 ;;
esac
`

// A command the BMC refuses is said as the BMC said it, not as a failed
// login with the next cipher suite.
func TestIPMIRefusedCommandIsNotALoginFailure(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ipmitool"), []byte(fakeIpmitool), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	c := DialBMCLib(&plan.BMC{Address: "bmc.invalid", Port: 6230, Protocol: plan.BMCIPMI}, loopback, Credentials{Username: "admin", Password: "pw"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := c.PowerState(ctx); err != nil || s != On {
		t.Fatalf("power status: %q %v", s, err)
	}
	err := c.SetBootDevice(ctx, "pxe", true)
	if err == nil || !strings.Contains(err.Error(), "Invalid data field in request") || strings.Contains(err.Error(), "RMCP+") {
		t.Errorf("refused boot device: %v", err)
	}
}

// wrongPasswordIpmitool is an ipmitool for a BMC that offers cipher suite
// 3 only and refuses the password, as ipmi_sim answers: suite 3 fails the
// session (the password), suite 17 is not offered.
const wrongPasswordIpmitool = `#!/bin/sh
suite=""; prev=""
for a in "$@"; do
	[ "$prev" = "-C" ] && suite=$a
	prev=$a
done
[ "$suite" = 3 ] || echo "Error in open session response message : invalid authentication algorithm"
echo "Error: Unable to establish IPMI v2 / RMCP+ session"
exit 1
`

// A refused login says what each cipher suite answered, not only the last
// one's "invalid authentication algorithm".
func TestIPMIRefusedLoginSaysEverySuite(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ipmitool"), []byte(wrongPasswordIpmitool), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	c := DialBMCLib(&plan.BMC{Address: "bmc.invalid", Port: 6230, Protocol: plan.BMCIPMI}, loopback, Credentials{Username: "admin", Password: "wrong"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.PowerState(ctx)
	if err == nil || !strings.Contains(err.Error(), "cipher suite 3: ") || !strings.Contains(err.Error(), "cipher suite 17: ") || !strings.Contains(err.Error(), "invalid authentication algorithm") {
		t.Errorf("a refused password: %v", err)
	}
}
