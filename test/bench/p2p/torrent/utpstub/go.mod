// Stand-in for github.com/anacrolix/go-utp, which the Go module proxy refuses
// to serve (403 "This module version is not available") at the pseudo-version
// anacrolix/torrent v1.62.0 requires. The benchmark runs TCP only (uTP
// disabled), so uTP is never used; this stub only satisfies the import.
module github.com/anacrolix/go-utp

go 1.26.8
