// Package image builds bootops' container image without a container
// daemon, with go-containerregistry: files become tar layers written the
// same way every time (entries sorted, one timestamp, fixed owners and
// modes), so the same inputs give the same image digest. The command in
// mkimage gathers the inputs (the binaries, Debian's boot files, the CA
// certificates) and writes the image to out/image/ (make image).
package image
