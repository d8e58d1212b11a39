//go:build tools

// Package fakegcsserver pins fake-gcs-server (a Google Cloud Storage
// emulator speaking the JSON and XML APIs) so that go mod tidy keeps its
// requirements; build.sh builds it from here for the backup tests.
package fakegcsserver

import (
	_ "github.com/fsouza/fake-gcs-server"
)
