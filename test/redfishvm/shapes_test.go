package redfishvm

import (
	"encoding/json"
	"os"
	"sort"
	"testing"
)

// extras are the properties ours carry that the mockups lack, each with
// why.
var extras = map[string]string{
	"Manager.VirtualMedia": "the manager's virtual media: where bmclib looks first, and iLO, Supermicro and OpenBMC keep it (the 2022 mockup moved it to the system)",
	"VirtualMedia.Actions": "InsertMedia and EjectMedia: the mockup's CD is an applet's, without actions",
}

// Each resource ours serves has its mockup's @odata.type and only
// properties the mockup has (nested objects too), but for extras; and
// the properties clients read are there.
func TestShapesMatchDMTFMockups(t *testing.T) {
	_, _, srv := newBMC(t, Config{})
	for _, c := range []struct {
		path, mockup string
		must         []string
	}{
		{rootPath + "/", "ServiceRoot", []string{"Systems", "Managers", "SessionService", "Links.Sessions"}},
		{systemsPath, "ComputerSystemCollection", []string{"Members", "Members@odata.count"}},
		{systemPath, "ComputerSystem", []string{"PowerState", "Boot.BootSourceOverrideTarget", "Boot.BootSourceOverrideEnabled", "Boot.BootSourceOverrideMode", "Boot.BootSourceOverrideTarget@Redfish.AllowableValues", "Actions.#ComputerSystem.Reset.target", "Actions.#ComputerSystem.Reset.ResetType@Redfish.AllowableValues"}},
		{managersPath, "ManagerCollection", []string{"Members"}},
		{managerPath, "Manager", []string{"ManagerType", "Links.ManagerForServers"}},
		{mediaCollectionPath, "VirtualMediaCollection", []string{"Members"}},
		{cdPath, "VirtualMedia", []string{"MediaTypes", "Image", "Inserted", "WriteProtected", "ConnectedVia"}},
		{sessionServicePath, "SessionService", []string{"Sessions"}},
		{sessionsPath, "SessionCollection", []string{"Members"}},
	} {
		_, ours := call(t, srv, "GET", c.path, "")
		raw, err := os.ReadFile("testdata/dmtf/" + c.mockup + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var mock map[string]any
		if err := json.Unmarshal(raw, &mock); err != nil {
			t.Fatalf("%s: %v", c.mockup, err)
		}
		if ours["@odata.type"] != mock["@odata.type"] {
			t.Errorf("%s: @odata.type %v, the mockup's %v", c.path, ours["@odata.type"], mock["@odata.type"])
		}
		for _, p := range notIn(ours, mock, c.mockup) {
			t.Errorf("%s has %s, which the mockup %s has not", c.path, p, c.mockup)
		}
		for _, p := range c.must {
			if !has(ours, p) {
				t.Errorf("%s lacks %s", c.path, p)
			}
		}
	}
}

// notIn lists the properties of ours (dotted paths, into objects both
// have) that mock has not, but for extras.
func notIn(ours, mock map[string]any, prefix string) []string {
	var missing []string
	for k, v := range ours {
		p := prefix + "." + k
		mv, ok := mock[k]
		switch {
		case !ok && extras[p] == "":
			missing = append(missing, p)
		case ok:
			o, isObj := v.(map[string]any)
			m, mockObj := mv.(map[string]any)
			if isObj && mockObj {
				missing = append(missing, notIn(o, m, p)...)
			}
		}
	}
	sort.Strings(missing)
	return missing
}

// has says whether v has the dotted path p ("Actions.#ComputerSystem.Reset"
// is one key with a dot: the longest key that fits is taken).
func has(v map[string]any, p string) bool {
	if _, ok := v[p]; ok {
		return true
	}
	for i := len(p) - 1; i > 0; i-- {
		if p[i] != '.' {
			continue
		}
		if sub, ok := v[p[:i]].(map[string]any); ok && has(sub, p[i+1:]) {
			return true
		}
	}
	return false
}
