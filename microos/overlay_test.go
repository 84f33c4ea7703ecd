package microos

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// The overlay is a cpio with the document and its signature, which verify
// with the key's public half; without a key there is none, and the reason
// says how to make one.
func TestBuildOverlays(t *testing.T) {
	p := &plan.Plan{Sites: []*plan.Site{{Name: "lab", Network: plan.Network{ServerAddress: "198.18.0.1", HTTPPort: 8080, HTTPSPort: 8443},
		Env: map[string]string{"HTTP_PROXY": "http://198.18.0.9:3128"}}}}
	if _, err := BuildOverlays(p, nil, "").Get("lab"); err == nil || !strings.Contains(err.Error(), "ca init") {
		t.Errorf("no key: %v", err)
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	o := BuildOverlays(p, priv, "-----BEGIN CERTIFICATE-----\n")
	b, err := o.Get("lab")
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	doc, sig := testutil.CPIOFile(got, strings.TrimPrefix(trust.OverlayPath, "/")), testutil.CPIOFile(got, strings.TrimPrefix(trust.OverlaySigPath, "/"))
	v, err := trust.VerifyOverlay([]string{base64.StdEncoding.EncodeToString(pub)}, []byte(doc), []byte(sig))
	if err != nil {
		t.Fatal(err)
	}
	if v.Server != "https://198.18.0.1:8443" || v.Site != "lab" || v.CA == "" || v.Env["HTTP_PROXY"] == "" {
		t.Errorf("overlay: %+v", v)
	}
	if _, err := o.Get("elsewhere"); err == nil {
		t.Error("an overlay for a site the Plan does not have")
	}
}
