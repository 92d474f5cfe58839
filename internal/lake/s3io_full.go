//go:build full

package lake

// The s3 blob IO of iceberg-go: registering the s3:// (and s3a://, s3n://)
// scheme is what lets lake.warehouse: s3://bucket/prefix be written and
// read by the committer, lake epoch and fanin verify. Only the S3 backend
// is linked, not iceberg-go/io/gocloud's GCS and Azure SDKs, which the
// fleet.yml keys do not configure.
import _ "github.com/apache/iceberg-go/io/gocloud/s3"
