package power

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// Routes are the daemon's power API, for `bootops power` and `bootops
// boot-device`:
//
//	GET  /api/v1/power/{site}/{node}        the BMC's power state: as last polled, or asked now with the token
//	POST /api/v1/power/{site}/{node}        {"action": "on"|"off"|"cycle"}
//	POST /api/v1/boot-device/{site}/{node}  {"device": "pxe"|"disk", "once": true}
//
// The POSTs need authorized (the daemon's operator token), and so does a
// GET that asks the BMC now: without it, a GET is answered from the last
// poll, so that no one can make the daemon log in to BMCs at will. Every
// answer comes within the BMC timeout, a BMC that did not answer is a 504.
func (m *Manager) Routes(authorized func(*http.Request) bool) map[string]http.Handler {
	return map[string]http.Handler{
		"GET /api/v1/power/{site}/{node}": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if authorized == nil || !authorized(r) {
				st, err := m.Last(key(r))
				m.answer(w, st, err)
				return
			}
			st, err := m.Query(r.Context(), key(r))
			m.answer(w, st, err)
		}),
		"POST /api/v1/power/{site}/{node}": m.guard(authorized, func(w http.ResponseWriter, r *http.Request) {
			var req ActionRequest
			if !readBody(w, r, &req, func() error { return checkAction(req.Action) }) {
				return
			}
			st, err := m.Act(r.Context(), key(r), req.Action)
			m.answer(w, st, err)
		}),
		"POST /api/v1/boot-device/{site}/{node}": m.guard(authorized, func(w http.ResponseWriter, r *http.Request) {
			var req BootDeviceRequest
			if !readBody(w, r, &req, func() error { return checkDevice(req.Device) }) {
				return
			}
			err := m.BootDevice(r.Context(), key(r), req.Device, req.Once)
			st, _ := m.Status(key(r))
			m.answer(w, st, err)
		}),
	}
}

// ActionRequest is POST /api/v1/power/{site}/{node}'s body.
type ActionRequest struct {
	Action string `json:"action"` // on, off or cycle
}

// BootDeviceRequest is POST /api/v1/boot-device/{site}/{node}'s body.
type BootDeviceRequest struct {
	Device string `json:"device"` // pxe or disk
	Once   bool   `json:"once"`
}

// Answer is every power route's reply: the node's power as its BMC last
// said, and why the request failed.
type Answer struct {
	Status
	Message string `json:"message,omitempty"`
}

func key(r *http.Request) string { return r.PathValue("site") + "/" + r.PathValue("node") }

func (m *Manager) guard(authorized func(*http.Request) bool, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if authorized == nil || !authorized(r) {
			http.Error(w, "power actions need an operator token with the operate role (serve --operators-file, --ui-token-file or the state folder's operator-token; bootops power --token-file)", http.StatusUnauthorized)
			return
		}
		h(w, r)
	})
}

// readBody reads a request's JSON body into v and checks it; what does not
// parse or pass check is a 400 that says why, before any BMC is asked.
func readBody(w http.ResponseWriter, r *http.Request, v any, check func() error) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err == nil {
		err = check()
	}
	if err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (m *Manager) answer(w http.ResponseWriter, st Status, err error) {
	w.Header().Set("Content-Type", "application/json")
	code := http.StatusOK
	body := Answer{Status: st}
	if err != nil {
		body.Message = err.Error()
		switch {
		case errors.Is(err, ErrNoNode):
			code = http.StatusNotFound
		case errors.Is(err, ErrNoBMC):
			code = http.StatusConflict
		case errors.Is(err, ErrBusy):
			code = http.StatusServiceUnavailable
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			code = http.StatusGatewayTimeout
		default:
			code = http.StatusBadGateway
		}
	}
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(body)
}
