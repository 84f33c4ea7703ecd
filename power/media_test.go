package power

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/redfishvm"
)

// newVMBMC is a Redfish BMC with virtual media (test/redfishvm) in front
// of a machine in memory, served on loopback over TLS for the test's
// life, and an image server beside it.
func newVMBMC(t *testing.T) (*redfishvm.BMC, *redfishvm.FakeMachine, *plan.BMC, string) {
	t.Helper()
	fake := &redfishvm.FakeMachine{}
	b := redfishvm.New(redfishvm.Config{Machine: fake, MediaDir: t.TempDir()})
	srv, err := b.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/edge.iso" {
			http.NotFound(w, r)
			return
		}
		w.Write(bytes.Repeat([]byte("CD001"), 1000))
	}))
	t.Cleanup(images.Close)
	return b, fake, redfishPlan(srv), images.URL + "/edge.iso"
}

// bmclib's Redfish provider inserts and ejects the BMC's virtual CD; an
// IPMI BMC has none.
func TestVirtualMediaThroughBMCLib(t *testing.T) {
	b, fake, bmc, image := newVMBMC(t)
	c := DialBMCLib(bmc, loopback, Credentials{Username: "root", Password: "calvin"}).(MediaController)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.SetVirtualMedia(ctx, image); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(fake.Media()); err != nil || len(got) != 5000 {
		t.Fatalf("the machine's CD holds %d bytes (%v), want the image's 5000", len(got), err)
	}
	if err := c.SetVirtualMedia(ctx, image); err != nil { // over one inserted: ejected first
		t.Fatal(err)
	}
	if err := c.SetVirtualMedia(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if fake.Media() != "" {
		t.Errorf("after the eject the machine's CD holds %s", fake.Media())
	}
	got := strings.Join(b.Saw("POST /redfish/v1/Managers"), "\n")
	want := "POST /redfish/v1/Managers/1/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia " + image + "\n" +
		"POST /redfish/v1/Managers/1/VirtualMedia/Cd/Actions/VirtualMedia.EjectMedia\n" +
		"POST /redfish/v1/Managers/1/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia " + image + "\n" +
		"POST /redfish/v1/Managers/1/VirtualMedia/Cd/Actions/VirtualMedia.EjectMedia"
	if got != want {
		t.Errorf("the BMC saw:\n%s\nwant:\n%s", got, want)
	}
	ipmi := DialBMCLib(&plan.BMC{Address: "127.0.0.1", Protocol: plan.BMCIPMI}, loopback, Credentials{}).(MediaController)
	if err := ipmi.SetVirtualMedia(ctx, image); !errors.Is(err, ErrNoMedia) {
		t.Errorf("virtual media of an IPMI BMC: %v", err)
	}
}

// mediaManager is a Manager of one node, "edge/n1", whose BMC is bmc,
// with the credentials a secret file gives and allows to loopback; its
// timeline is returned with it.
func mediaManager(t *testing.T, bmc *plan.BMC) (*Manager, func() []string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge"), []byte("root:calvin\nallow: 127.0.0.1/32\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bmc.Secret = "edge"
	var mu sync.Mutex
	var events []string
	m := &Manager{
		Plan: func() *plan.Plan {
			return &plan.Plan{Sites: []*plan.Site{{Name: "edge", Nodes: []*plan.Node{{Name: "n1", BMC: bmc}}}}}
		},
		Record: func(site, node, msg string, isErr bool, gen int) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, msg)
		},
		Secrets:     &Secrets{Dir: dir},
		InsecureTLS: true,
		Settle:      2 * time.Second,
	}
	return m, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), events...)
	}
}

// InsertMedia: the image in the CD, the next boot from it once, and a
// power-on of a node that is off (the override taken by that boot); a
// second one power-cycles; EjectMedia empties the CD. Each step lands
// on the BMC and on the node's timeline.
func TestManagerInsertMedia(t *testing.T) {
	b, fake, bmc, image := newVMBMC(t)
	m, timeline := mediaManager(t, bmc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := m.InsertMedia(ctx, "edge/n1", image+"?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if st.Power != On {
		t.Errorf("status after InsertMedia: %+v", st)
	}
	if _, err := m.InsertMedia(ctx, "edge/n1", image); err != nil {
		t.Fatal(err)
	}
	if err := m.EjectMedia(ctx, "edge/n1"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fake.Calls(), ", "); !strings.HasPrefix(got, "insert ") || !strings.Contains(got, ", on Cd, eject, insert ") || !strings.HasSuffix(got, ", reset Cd, eject") {
		t.Errorf("the machine was told: %s", got)
	}
	orders := strings.Join(append(b.Saw("PATCH"), b.Saw("POST /redfish/v1/Systems")...), "\n")
	want := "PATCH /redfish/v1/Systems/1 BootSourceOverrideEnabled=Once BootSourceOverrideMode=UEFI BootSourceOverrideTarget=Cd\n" +
		"PATCH /redfish/v1/Systems/1 BootSourceOverrideEnabled=Once BootSourceOverrideMode=UEFI BootSourceOverrideTarget=Cd\n" +
		"POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset On (boot Cd first)\n" +
		"POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset ForceRestart (boot Cd first)"
	if orders != want {
		t.Errorf("the BMC saw:\n%s\nwant:\n%s", orders, want)
	}
	events := strings.Join(timeline(), "\n")
	for _, e := range []string{
		"power: virtual CD " + image + " inserted (asked by an operator)",
		"power: set next boot cdrom (once) (asked by an operator)",
		"power: powered on to boot the virtual CD (it was off) (asked by an operator)",
		"power: cycled to boot the virtual CD (asked by an operator)",
		"power: virtual CD ejected (asked by an operator)",
	} {
		if !strings.Contains(events, e) {
			t.Errorf("the timeline lacks %q:\n%s", e, events)
		}
	}
	if strings.Contains(events, "s3cret") {
		t.Errorf("the image URL's query reached the timeline:\n%s", events)
	}
}

// What InsertMedia refuses before any BMC is asked, and what fails at
// the BMC: each says why, on the timeline too.
func TestManagerInsertMediaRefused(t *testing.T) {
	b, fake, bmc, image := newVMBMC(t)
	m, timeline := mediaManager(t, bmc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for url, want := range map[string]string{
		"ftp://127.0.0.1/edge.iso":       "want an http:// or https:// URL",
		"http://u:pw@127.0.0.1/edge.iso": "no user or password in it",
		"/edge.iso":                      "want an http:// or https:// URL",
	} {
		_, err := m.InsertMedia(ctx, "edge/n1", url)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("InsertMedia %s: %v, want %q", url, err, want)
		}
	}
	if _, err := m.InsertMedia(ctx, "edge/nope", image); !errors.Is(err, ErrNoNode) {
		t.Errorf("an unknown node: %v", err)
	}
	_, err := m.InsertMedia(ctx, "edge/n1", strings.Replace(image, "edge.iso", "missing.iso?token=s3cret", 1))
	if err == nil || !strings.Contains(err.Error(), "virtual media insert") || !strings.Contains(err.Error(), "404 Not Found") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("an image the BMC cannot fetch: %v", err)
	}
	if got := fake.Calls(); len(got) != 0 {
		t.Errorf("the machine was told %q", got)
	}
	if n := len(b.Saw("PATCH")) + len(b.Saw("POST /redfish/v1/Systems")); n != 0 {
		t.Errorf("%d boot or power orders after a failed insert", n)
	}
	if events := strings.Join(timeline(), "\n"); !strings.Contains(events, "power: inserting virtual CD http://127.0.0.1:") || !strings.Contains(events, "/missing.iso failed: virtual media insert") || strings.Contains(events, "s3cret") {
		t.Errorf("timeline:\n%s", events)
	}
	ipmi := &plan.BMC{Address: "127.0.0.1", Protocol: plan.BMCIPMI}
	mi, _ := mediaManager(t, ipmi)
	if err := mi.EjectMedia(ctx, "edge/n1"); !errors.Is(err, ErrNoMedia) {
		t.Errorf("eject through an IPMI BMC: %v", err)
	}
}

// bmc.boot: virtual-media on a power: auto site: a new node's round
// inserts its medium (from MediaURL), boots it once and powers the node
// on; once the node is provisioned at its generation, the next round
// ejects the CD, and only once.
func TestAutoBootsVirtualMediaThenEjects(t *testing.T) {
	b, fake, bmc, image := newVMBMC(t)
	bmc.Boot = plan.BootVirtualMedia
	m, timeline := mediaManager(t, bmc)
	m.Plan = func() *plan.Plan {
		return &plan.Plan{Sites: []*plan.Site{{Name: "edge", Power: plan.PowerAuto, Nodes: []*plan.Node{{Name: "n1", Site: "edge", BMC: bmc}}}}}
	}
	var mu sync.Mutex
	installed := false
	m.Node = func(site, node string) (bool, int, bool) {
		mu.Lock()
		defer mu.Unlock()
		return false, 0, installed
	}
	m.MediaURL = func(site, node string) string { return image + "?" + site + "/" + node }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m.Round(ctx)
	if got := strings.Join(fake.Calls(), ", "); !strings.HasPrefix(got, "insert ") || !strings.Contains(got, "on Cd") {
		t.Fatalf("the machine was told: %s", got)
	}
	if saw := b.Saw("POST /redfish/v1/Managers"); len(saw) != 1 || !strings.HasSuffix(saw[0], "InsertMedia "+image+"?edge/n1") {
		t.Errorf("the BMC saw %q", saw)
	}
	m.Round(ctx) // cycled for generation 0: not again; not provisioned: not ejected
	if fake.Media() == "" || strings.Contains(strings.Join(fake.Calls(), ","), "eject") {
		t.Fatalf("the CD was emptied before the node was provisioned: %s", fake.Calls())
	}
	mu.Lock()
	installed = true
	mu.Unlock()
	m.Round(ctx)
	m.Round(ctx)
	if fake.Media() != "" {
		t.Errorf("the CD still holds %s after the node was provisioned", fake.Media())
	}
	if n := strings.Count(strings.Join(fake.Calls(), ","), "eject"); n != 1 {
		t.Errorf("ejected %d times, want once: %s", n, fake.Calls())
	}
	events := strings.Join(timeline(), "\n")
	for _, e := range []string{"(asked by power: auto)", "power: booted its virtual medium for generation 0 (a new node)",
		"power: virtual CD ejected: the node is provisioned at generation 0"} {
		if !strings.Contains(events, e) {
			t.Errorf("the timeline lacks %q:\n%s", e, events)
		}
	}
}
