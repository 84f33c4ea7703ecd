package agent

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// Config is what the agent knows before it checks in: where the server is,
// how to trust it, and who the machine booted as.
type Config struct {
	Server, Site string
	// Node, Machine and Token come from the kernel command line the boot
	// server rendered; a Micro-OS booted without one (a UKI, TLS mode)
	// checks in by its identity, over TLS, with no token.
	Node, Machine, Token string
	// RootCAs is the site CA the agent pins for https (nil: https is
	// refused, for want of a way to verify the server).
	RootCAs *x509.CertPool
	// Env is the site overlay's environment, set before the workflow runs.
	Env map[string]string
	// Boot is how the machine booted, reported at check-in.
	Boot plan.BootInfo
	// Source says where the settings came from, for the console.
	Source string
}

// FromCmdline is the configuration of a kernel command line alone (the
// iPXE chain without TLS).
func FromCmdline(args map[string]string) Config {
	return Config{Server: args[plan.CmdlineServer], Site: args[plan.CmdlineSite], Node: args[plan.CmdlineNode],
		Machine: args[plan.CmdlineMachine], Token: args[plan.CmdlineToken], Source: "kernel command line"}
}

// Load reads the agent's settings inside the Micro-OS rooted at root:
// the built-in ones (trust.ConfigPath, covered by Secure Boot in a signed
// UKI), the site overlay when the Micro-OS was built to need one, and the
// kernel command line (args). The CA only ever comes from the image or a
// verified overlay, never from the command line; a Micro-OS built to
// need an overlay takes its server from the overlay alone.
func Load(args map[string]string, root, sysfs string) (Config, error) {
	cfg := FromCmdline(args)
	var built trust.Config
	if b, err := os.ReadFile(filepath.Join(root, trust.ConfigPath)); err == nil {
		if err := json.Unmarshal(b, &built); err != nil {
			return cfg, fmt.Errorf("built-in settings %s: %w", trust.ConfigPath, err)
		}
		cfg.Source = "built in"
		if cfg.Server == "" {
			cfg.Server = built.Server
		}
		if cfg.Site == "" {
			cfg.Site = built.Site
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return cfg, err
	}
	ca := built.CA
	if len(built.OverlayKeys) > 0 {
		doc, err1 := os.ReadFile(filepath.Join(root, trust.OverlayPath))
		sig, err2 := os.ReadFile(filepath.Join(root, trust.OverlaySigPath))
		if err1 != nil || err2 != nil {
			return cfg, errors.New("this Micro-OS runs only with a signed site overlay, and none was loaded beside it (is the MicroOS's overlay: true, and the boot server's overlay key set?)")
		}
		o, err := trust.VerifyOverlay(built.OverlayKeys, doc, sig)
		if err != nil {
			return cfg, fmt.Errorf("site overlay refused: %w", err)
		}
		cfg.Server, cfg.Site, cfg.Env, cfg.Source = o.Server, o.Site, o.Env, "signed site overlay"
		if o.CA != "" {
			ca = o.CA
		}
	}
	if ca != "" {
		pool, err := trust.PoolFromPEM(ca)
		if err != nil {
			return cfg, err
		}
		cfg.RootCAs = pool
	}
	cfg.Boot = bootInfo(sysfs, args, built.Chain, strings.HasPrefix(cfg.Server, "https://"))
	return cfg, nil
}

// efiGlobal is the vendor GUID of the UEFI globals (SecureBoot).
const efiGlobal = "8be4df61-93ca-11d2-aa0d-00e098032b8c"

// bootInfo reads how the machine booted: UEFI when the kernel has
// /sys/firmware/efi, Secure Boot when the SecureBoot variable's value (the
// byte after its 4 attribute bytes) is 1; the chain from the command line
// (bootops.chain=), else from the image (a UKI says so), else iPXE.
func bootInfo(sysfs string, args map[string]string, builtChain string, tls bool) plan.BootInfo {
	b := plan.BootInfo{Firmware: "bios", Chain: plan.ChainIPXE, TLS: tls}
	if _, err := os.Stat(filepath.Join(sysfs, "firmware/efi")); err == nil {
		b.Firmware = "uefi"
		b.SecureBoot = secureBoot(sysfs)
	}
	switch {
	case args[plan.CmdlineChain] != "":
		b.Chain = args[plan.CmdlineChain]
	case builtChain != "":
		b.Chain = builtChain
	}
	return b
}

// secureBoot reports whether the SecureBoot EFI variable's value (the
// byte after its 4 attribute bytes) is 1.
func secureBoot(sysfs string) bool {
	v, err := os.ReadFile(filepath.Join(sysfs, "firmware/efi/efivars/SecureBoot-"+efiGlobal))
	return err == nil && len(v) >= 5 && v[4] == 1
}

// check says why cfg cannot reach a server it can trust ("" if it can).
func (c Config) check() error {
	switch {
	case c.Server == "" || c.Site == "":
		return errors.New("no bootops.server or bootops.site: on the kernel command line, built in, or from a site overlay: was this booted by bootops?")
	case strings.HasPrefix(c.Server, "https://") && c.RootCAs == nil:
		return fmt.Errorf("the server %s is https, and this Micro-OS carries no site CA to verify it: build it with --ca, or give it a signed site overlay", c.Server)
	case strings.HasPrefix(c.Server, "https://"):
		// Over TLS, a machine booted without a token checks in by its
		// identity.
	case c.Token == "":
		return errors.New("no bootops.token on the kernel command line: over plain HTTP the agent checks in only with the token its script carried")
	case c.Node == "" && c.Machine == "":
		return errors.New("no bootops.node or bootops.machine on the kernel command line")
	}
	return nil
}

// client is the HTTP client of the agent's requests to the server and of
// its downloads: with a site CA, TLS trusts that CA and nothing else.
func (c Config) client(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if c.RootCAs != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Timeout: timeout, Transport: t}
}

// tlsRefusal says, for an operator at the console, that a server could
// not prove it is the site's; "" when err is something else.
func tlsRefusal(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var inval x509.CertificateInvalidError
	var rec tls.RecordHeaderError
	switch {
	case errors.As(err, &unknown):
		return "its certificate is not signed by the site CA this Micro-OS trusts"
	case errors.As(err, &host):
		return "its certificate is for another host"
	case errors.As(err, &inval):
		return "its certificate is not valid: " + inval.Error()
	case errors.As(err, &rec):
		return "it does not speak TLS"
	case err != nil && bytes.Contains([]byte(err.Error()), []byte("tls: ")):
		return "the TLS handshake failed"
	}
	return ""
}
