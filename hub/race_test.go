//go:build race

package hub

// raceDetector: the race detector makes decoding 64 KiB events about ten
// times slower; the tests that decode tens of thousands send fewer.
const raceDetector = true
