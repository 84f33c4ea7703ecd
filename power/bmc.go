package power

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/bmc-toolbox/bmclib/v2/providers/redfish"
	"github.com/jacobweinstock/registrar"

	"github.com/bootops/bootops/plan"
)

// Power states as bootops shows them.
const (
	On          = "on"
	Off         = "off"
	Unknown     = "unknown"     // not asked yet
	Unreachable = "unreachable" // the BMC did not answer, or refused us
)

// Controller is one machine's BMC as the daemon uses it. Every call ends
// by ctx's deadline.
type Controller interface {
	// PowerState is On or Off.
	PowerState(ctx context.Context) (string, error)
	// SetPower is "on", "off" or "cycle".
	SetPower(ctx context.Context, action string) error
	// SetBootDevice sets the next boot device ("pxe", "disk"), for the
	// next boot only when once.
	SetBootDevice(ctx context.Context, device string, once bool) error
}

// Dial makes a node's Controller from its Plan entry and credentials. to
// is the address b.Address resolved to and the daemon allowed the
// credentials to go: the Controller connects there and nowhere else, and
// never resolves b.Address again.
type Dial func(b *plan.BMC, to netip.Addr, c Credentials) Controller

// DialBMCLib reaches BMCs through bmclib: IPMI through ipmitool, Redfish
// through gofish. A connection is opened per call: BMCs drop idle
// sessions, and a call is rare.
func DialBMCLib(b *plan.BMC, to netip.Addr, c Credentials) Controller {
	return &bmcLib{b: *b, c: c, to: to}
}

type bmcLib struct {
	b  plan.BMC
	c  Credentials
	to netip.Addr
}

// ipmiCipherSuites are the RMCP+ cipher suites tried at the login, in
// bmclib's order.
var ipmiCipherSuites = []string{"3", "17"}

// client is a bmclib client whose every connection ends by deadline; for
// IPMI, with the cipher suite pinned to suite.
func (x *bmcLib) client(deadline time.Time, suite string) *bmclib.Client {
	var opts []bmclib.Option
	host := x.to.String() // ipmitool -H: the checked address
	switch x.b.Protocol {
	case plan.BMCIPMI:
		if suite != "" {
			opts = append(opts, bmclib.WithIpmitoolCipherSuite(suite))
		}
		if x.b.Port != 0 {
			opts = append(opts, bmclib.WithIpmitoolPort(strconv.Itoa(x.b.Port)))
		}
	case plan.BMCRedfish:
		if x.b.Port != 0 {
			opts = append(opts, bmclib.WithRedfishPort(strconv.Itoa(x.b.Port)))
		}
		// The URL keeps Git's address, for the certificate's name and the
		// Host header; the connection goes to the checked address. No
		// proxy: the BMC's password goes to it alone.
		host = x.b.Address
		// gofish sends its requests without the call's context, each
		// with the time left at the login as its timeout: the deadline is
		// set on the connections themselves. (bmclib clones the
		// transport: it must stay an *http.Transport.)
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := x.dialChecked(ctx, network, addr)
			if err == nil && !deadline.IsZero() {
				conn.SetDeadline(deadline)
			}
			return conn, err
		}
		conf := &tls.Config{InsecureSkipVerify: !x.b.TLSVerify} // tlsVerify: false in Git, and the daemon allows it
		// gofish (through bmclib) opens a connection per request: a BMC
		// whose web server drops connections it cannot serve yet would
		// fail every call. A connection dropped before its handshake
		// ends is opened again, once, at once.
		dialTLS := func(ctx context.Context, network, addr string) (net.Conn, error) {
			for try := 1; ; try++ {
				conn, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				c := conf.Clone()
				c.ServerName, _, _ = net.SplitHostPort(addr)
				hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				tc := tls.Client(conn, c)
				err = tc.HandshakeContext(hctx)
				cancel()
				if err == nil {
					return tc, nil
				}
				conn.Close()
				if try >= 2 || !Dropped(err) || ctx.Err() != nil {
					return nil, err
				}
			}
		}
		hc := &http.Client{Transport: &http.Transport{
			DialContext:         dial,
			DialTLSContext:      dialTLS,
			TLSClientConfig:     conf,
			TLSHandshakeTimeout: 10 * time.Second,
		}}
		opts = append(opts, bmclib.WithHTTPClient(hc))
		if x.b.Auth == plan.AuthBasic {
			opts = append(opts, bmclib.WithRedfishUseBasicAuth(true))
		}
	}
	cl := bmclib.NewClient(host, x.c.Username, x.c.Password, opts...)
	// Only the protocol Git names, and for Redfish only the generic
	// provider: a vendor's extensions add nothing to power and boot
	// device, and each provider tried costs the BMC a login.
	drivers := cl.Registry.Using(x.b.Protocol)
	if x.b.Protocol == plan.BMCRedfish {
		drivers = slices.DeleteFunc(drivers, func(d *registrar.Driver) bool { return d.Name != redfish.ProviderName })
	}
	cl.Registry.Drivers = drivers
	return cl
}

// dialChecked connects to the checked address for the BMC's own host
// name, and refuses any other (a redirect elsewhere).
func (x *bmcLib) dialChecked(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(strings.TrimSuffix(host, "."), strings.TrimSuffix(x.b.Address, ".")) {
		return nil, fmt.Errorf("refused to connect to %s: the daemon checked only %s (%s)", host, x.b.Address, x.to)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(x.to.String(), port))
}

// closeMax is the most a logout may take, and the most of a call's time
// kept back for it.
const closeMax = 2 * time.Second

// do opens the BMC, runs f and closes it, saying which BMC and what
// failed, and naming a timeout as one. The whole call, login, f and
// logout, ends by ctx's deadline (DefaultTimeout without one): f runs
// until a fifth of the time before it (at most closeMax), which is kept
// for the logout, and every connection ends at the deadline, whatever
// bmclib does with the context.
func (x *bmcLib) do(ctx context.Context, what string, f func(context.Context, *bmclib.Client) error) error {
	if !x.to.IsValid() {
		return fmt.Errorf("%s: BMC %s (%s): no checked address to reach it at", what, x.b.Host(), x.b.Protocol)
	}
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(DefaultTimeout)
	}
	opDeadline := deadline.Add(-min(closeMax, deadline.Sub(start)/5))
	opCtx, cancel := context.WithDeadline(ctx, opDeadline)
	defer cancel()
	// bmclib's ipmitool tries each cipher suite for every command and
	// keeps the last one's output: a command the BMC refused ("Invalid
	// data field in request") came back as the next suite's failed
	// login. The suite is found at the login, and pinned for the command.
	suites := []string{""}
	if x.b.Protocol == plan.BMCIPMI {
		suites = ipmiCipherSuites
	}
	var cl *bmclib.Client
	var err error
	var refused []string // each cipher suite's failed login, said as its own
	for _, suite := range suites {
		cl = x.client(deadline, suite)
		if err = cl.Open(opCtx); err == nil || opCtx.Err() != nil {
			break
		}
		if suite != "" {
			refused = append(refused, "cipher suite "+suite+": "+tidy(err))
		}
	}
	if err != nil && len(refused) > 1 && opCtx.Err() == nil {
		// Not only the last suite's error: a wrong password shows as the
		// first suite's, another suite's says only that it is not offered.
		err = errors.New(strings.Join(refused, "; "))
	}
	if err == nil {
		err = f(opCtx, cl)
		by := time.Now().Add(closeMax)
		if deadline.Before(by) {
			by = deadline
		}
		closeBy(ctx, cl, by)
	}
	if err == nil {
		return nil
	}
	// bmclib gives its HTTP client a timeout of its own, from the same
	// deadline: it may fire just before the context does (and bmclib's
	// error may not wrap it).
	var ne net.Error
	nearDeadline := time.Until(opDeadline) < 250*time.Millisecond
	if opCtx.Err() != nil || nearDeadline || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		after := time.Since(start)
		if nearDeadline {
			after = deadline.Sub(start) // the time it had
		}
		return &TimeoutError{What: what, BMC: x.b.Host() + " (" + x.b.Protocol + ")", After: after}
	}
	return fmt.Errorf("%s: BMC %s (%s): %s", what, x.b.Host(), x.b.Protocol, tidy(err))
}

// closeBy logs out, waiting until by at the latest: a BMC that hung on
// the call hangs on the logout too, and bmclib's Close gives itself time
// of its own when the context has ended. Its connections end by the
// call's deadline, so what goes on past by ends soon after.
func closeBy(ctx context.Context, cl *bmclib.Client, by time.Time) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), by)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.Close(ctx)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// TimeoutError is a BMC that did not answer in time.
type TimeoutError struct {
	What, BMC string
	After     time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s: BMC %s did not answer within %s", e.What, e.BMC, e.After.Round(time.Second))
}

// Unwrap makes a TimeoutError a context.DeadlineExceeded: what waits on
// a BMC (a rollout's retries) sees a timeout.
func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

func isTimeout(err error) bool {
	var t *TimeoutError
	return errors.As(err, &t)
}

// tidy keeps a bmclib error readable: one line, bounded, without
// bmclib's wrapping ("2 errors occurred: * provider: ipmitool: …", "no
// Opener implementations found": there is one provider).
func tidy(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	for _, noise := range []string{"* no Opener implementations found", "* no PowerStateGetter implementations found", "* no PowerSetter implementations found", "* no BootDeviceSetter implementations found", "* no VirtualMediaSetter implementations found"} {
		s = strings.ReplaceAll(s, noise, "")
	}
	if i := strings.Index(s, " errors occurred: * "); i >= 0 && i < 4 {
		s = s[i+len(" errors occurred: * "):]
	}
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(s, "provider: ipmitool: "), "provider: gofish: "))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func (x *bmcLib) PowerState(ctx context.Context) (string, error) {
	var state string
	err := x.do(ctx, "power status", func(ctx context.Context, cl *bmclib.Client) error {
		s, err := cl.GetPowerState(ctx)
		if err != nil {
			return err
		}
		state, err = parseState(s)
		return err
	})
	return state, err
}

// parseState reads a provider's answer: ipmitool's "Chassis Power is on",
// Redfish's "On", "Off", "PoweringOn"…
func parseState(s string) (string, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	switch {
	case strings.HasSuffix(l, " on") || l == "on" || l == "poweringoff":
		return On, nil
	case strings.HasSuffix(l, " off") || l == "off" || l == "poweringon":
		return Off, nil
	}
	return "", fmt.Errorf("the BMC said %q, neither on nor off", s)
}

func (x *bmcLib) SetPower(ctx context.Context, action string) error {
	return x.do(ctx, "power "+action, func(ctx context.Context, cl *bmclib.Client) error {
		ok, err := cl.SetPowerState(ctx, action)
		if err == nil && !ok {
			err = errors.New("the BMC did not accept it")
		}
		return err
	})
}

func (x *bmcLib) SetBootDevice(ctx context.Context, device string, once bool) error {
	return x.do(ctx, "boot device "+device, func(ctx context.Context, cl *bmclib.Client) error {
		ok, err := cl.SetBootDevice(ctx, device, !once, x.b.BootMode != plan.BootLegacy)
		if err == nil && !ok {
			err = errors.New("the BMC did not accept it")
		}
		return err
	})
}
