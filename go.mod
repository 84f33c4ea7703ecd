module github.com/bootops/bootops

go 1.26.8

require (
	cuelang.org/go v0.17.1
	github.com/fsnotify/fsnotify v1.10.1
	github.com/insomniacslk/dhcp v0.0.0-20260901064844-234b97448fae
	github.com/pin/tftp/v3 v3.1.0
	go.yaml.in/yaml/v3 v3.0.4
	golang.org/x/sync v0.21.0
)

require (
	github.com/cockroachdb/apd/v3 v3.2.3 // indirect
	github.com/emicklei/proto v1.14.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/josharian/native v1.1.0 // indirect
	github.com/mitchellh/go-wordwrap v1.0.1 // indirect
	github.com/pelletier/go-toml/v2 v2.3.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.14 // indirect
	github.com/protocolbuffers/txtpbfmt v0.0.0-20260420112717-c39628bde8b5 // indirect
	github.com/u-root/uio v0.0.0-20230220225925-ffce2a382923 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/text v0.38.0 // indirect
	google.golang.org/protobuf v1.33.0 // indirect
)
