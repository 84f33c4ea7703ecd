package trust

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"time"
)

// A cluster's certificates: the URI marks a certificate of the CA as one
// of a cluster's servers'; only such a certificate may open a route of
// that cluster. A hub's servers and a site's daemons are two kinds: a
// certificate of one never joins the other.
const (
	routeURI = "urn:bootops:hub-route"
	peerURI  = "urn:bootops:site-peer"
)

// IssueRoute makes a hub server's cluster certificate, signed by the CA in
// dir: server and client authentication (a route is dialled both ways),
// the route URI, and hosts (the addresses and names the other servers'
// --routes URLs use) as its names; valid for days.
func IssueRoute(dir, name string, hosts []string, days int, now time.Time) (cert, key []byte, err error) {
	return issueCluster(dir, name, "bootops hub", routeURI, hosts, days, now)
}

// IssuePeer makes a site daemon's cluster certificate (a site with more
// than one server), signed by the site's CA in dir, as IssueRoute does a
// hub server's, with the site-peer URI.
func IssuePeer(dir, name string, hosts []string, days int, now time.Time) (cert, key []byte, err error) {
	return issueCluster(dir, name, "bootops site", peerURI, hosts, days, now)
}

func issueCluster(dir, name, org, uri string, hosts []string, days int, now time.Time) (cert, key []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("give the addresses or names the other servers reach this one by (--host h1.example.net)")
	}
	u, _ := url.Parse(uri)
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name, Organization: []string{org}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{u},
	}
	addHosts(tmpl, hosts)
	return issue(dir, name, days, now, tmpl)
}

// RouteTLS is a hub server's cluster TLS: its route certificate and key
// (files), and the hub's CA (a file) that must have signed every other
// server's — which must carry the route URI too. Both ends of a route
// present and check a certificate.
func RouteTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	return clusterTLS(certFile, keyFile, caFile, routeURI, "hub server's route")
}

// PeerTLS is a site daemon's cluster TLS: its peer certificate and key,
// and the site's CA, which must have signed every other member's peer
// certificate.
func PeerTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	return clusterTLS(certFile, keyFile, caFile, peerURI, "site daemon's peer")
}

func clusterTLS(certFile, keyFile, caFile, uri, what string) (*tls.Config, error) {
	if err := private(keyFile); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	cas, err := PoolFromPEM(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caFile, err)
	}
	return &tls.Config{
		Certificates:          []tls.Certificate{pair},
		RootCAs:               cas,
		ClientCAs:             cas,
		ClientAuth:            tls.RequireAndVerifyClientCert,
		MinVersion:            tls.VersionTLS12,
		VerifyPeerCertificate: requireURI(uri, what),
	}, nil
}

// requireURI refuses a peer whose verified certificate does not carry uri.
func requireURI(uri, what string) func([][]byte, [][]*x509.Certificate) error {
	return func(_ [][]byte, chains [][]*x509.Certificate) error {
		for _, ch := range chains {
			if len(ch) > 0 && slices.ContainsFunc(ch[0].URIs, func(u *url.URL) bool { return u.String() == uri }) {
				return nil
			}
		}
		return errors.New("the peer's certificate is no " + what + " certificate (" + uri + ")")
	}
}
