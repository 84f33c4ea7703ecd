// Package api is bootops' HTTP API described: the OpenAPI 3.1 document of
// every route the boot plane's server, the daemon and the hub serve,
// embedded, and the handler that serves it at Path.
//
// openapi.json is generated (go generate ./api): the JSON schemas come
// from the Go types the handlers encode and decode, the paths from
// api/spec. TestDocumentUpToDate fails while the committed file differs
// from what the generator makes.
package api

import (
	_ "embed"
	"net/http"
)

//go:generate go run ./gen -o openapi.json

// Path is where the servers serve the document.
const Path = "/api/v1/openapi.json"

//go:embed openapi.json
var document []byte

// Document is the OpenAPI document, as JSON.
func Document() []byte { return document }

// Handler serves the document (GET Path).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(document)
	})
}
