module example.com/trellara-examples

go 1.26.0

require github.com/trellara/trellara v0.0.0-00010101000000-000000000000

require (
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.50.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/trellara/trellara => ../
