// Package browser tests the dashboard in Debian's headless Chromium,
// driven over the DevTools protocol, against a real `bootops serve` with
// 1,000 simulated nodes (build tag browser; `make browser`, and `make
// test` runs it). It saves screenshots and the measured first paint and
// live-update delay under test/browser/out/.
package browser
