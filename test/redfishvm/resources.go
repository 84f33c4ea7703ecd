package redfishvm

// The resources' paths. There is one system, "1", one manager, "1", and
// one virtual CD, "Cd".
const (
	rootPath            = "/redfish/v1"
	sessionServicePath  = rootPath + "/SessionService"
	sessionsPath        = sessionServicePath + "/Sessions"
	systemsPath         = rootPath + "/Systems"
	systemPath          = systemsPath + "/1"
	resetPath           = systemPath + "/Actions/ComputerSystem.Reset"
	managersPath        = rootPath + "/Managers"
	managerPath         = managersPath + "/1"
	mediaCollectionPath = managerPath + "/VirtualMedia"
	cdPath              = mediaCollectionPath + "/Cd"
	insertPath          = cdPath + "/Actions/VirtualMedia.InsertMedia"
	ejectPath           = cdPath + "/Actions/VirtualMedia.EjectMedia"
)

// The resources' schema versions: those of the DMTF mockups in
// testdata/dmtf, whose properties ours are a part of (a test checks).
const (
	serviceRootType    = "#ServiceRoot.v1_15_0.ServiceRoot"
	computerSystemType = "#ComputerSystem.v1_20_0.ComputerSystem"
	managerType        = "#Manager.v1_17_0.Manager"
	virtualMediaType   = "#VirtualMedia.v1_6_0.VirtualMedia"
	sessionServiceType = "#SessionService.v1_1_8.SessionService"
	sessionType        = "#Session.v1_6_0.Session"
)

func link(path string) map[string]any { return map[string]any{"@odata.id": path} }

func enabled() map[string]any { return map[string]any{"State": "Enabled", "Health": "OK"} }

func serviceRoot() map[string]any {
	return map[string]any{
		"@odata.type":    serviceRootType,
		"@odata.id":      rootPath + "/",
		"Id":             "RootService",
		"Name":           "Root Service",
		"RedfishVersion": "1.15.0",
		"UUID":           "3c6b7f4e-9d1a-4c55-8a0e-5f2b1d6e7a90",
		"Systems":        link(systemsPath),
		"Managers":       link(managersPath),
		"SessionService": link(sessionServicePath),
		"Links":          map[string]any{"Sessions": link(sessionsPath)},
	}
}

// collection is a resource collection of members.
func collection(odataType, name, path string, members ...string) map[string]any {
	ms := []any{}
	for _, m := range members {
		ms = append(ms, link(m))
	}
	return map[string]any{
		"@odata.type":         odataType,
		"@odata.id":           path,
		"Name":                name,
		"Members@odata.count": len(ms),
		"Members":             ms,
	}
}

func sessionService() map[string]any {
	return map[string]any{
		"@odata.type":    sessionServiceType,
		"@odata.id":      sessionServicePath,
		"Id":             "SessionService",
		"Name":           "Session Service",
		"Status":         enabled(),
		"ServiceEnabled": true,
		"SessionTimeout": 30,
		"Sessions":       link(sessionsPath),
	}
}

func sessionResource(id, user string) map[string]any {
	return map[string]any{
		"@odata.type": sessionType,
		"@odata.id":   sessionsPath + "/" + id,
		"Id":          id,
		"Name":        "User Session",
		"UserName":    user,
	}
}

// manager is the BMC itself. Its VirtualMedia link is where bmclib
// looks first (and iLO, Supermicro and OpenBMC keep it); DMTF's newer
// mockups have it under the system.
func manager() map[string]any {
	return map[string]any{
		"@odata.type":     managerType,
		"@odata.id":       managerPath,
		"Id":              "1",
		"Name":            "Manager",
		"ManagerType":     "BMC",
		"Description":     "QEMU test BMC",
		"Model":           "redfishvm",
		"FirmwareVersion": "1.0.0",
		"Status":          enabled(),
		"PowerState":      "On",
		"VirtualMedia":    link(mediaCollectionPath),
		"Links": map[string]any{
			"ManagerForServers": []any{link(systemPath)},
		},
	}
}
