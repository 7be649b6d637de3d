// Package image checks the image the Dockerfile at the repository's root
// builds. There is no container engine here, so the image is checked
// through its parts, read with BuildKit's own Dockerfile parser: the final
// stage's settings, and the build stage's `go build`, run as the
// Dockerfile writes it in the context .dockerignore leaves, whose binary
// must be static and must run as the image's user with nothing writable.
//
// It is a Go module of its own so that what these tests read the
// Dockerfile and .dockerignore with (BuildKit's parser, Docker's
// .dockerignore matcher, a POSIX shell parser) stays out of the main
// module's go.mod. The tests read the root's files by a relative path
// (../..), and use the main module's internal/e2e and internal/testenv
// from this checkout (go.mod's replace directive). From this directory:
//
//	go test ./...
package image
