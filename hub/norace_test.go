//go:build !race

package hub

const raceDetector = false
