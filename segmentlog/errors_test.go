package segmentlog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The log's errors name no command; AddRecovery puts the caller's at the
// end, through any wrapping, and leaves other errors alone.
func TestAddRecovery(t *testing.T) {
	const recovery = "start over with a full snapshot"
	corrupt := fmt.Errorf("read offset 7: %w", &CorruptionError{Path: "/log/0.seg", Position: 40, Reason: "bad checksum"})
	if strings.Contains(corrupt.Error(), "trellara ") || !strings.HasSuffix(corrupt.Error(), "restore the directory from a replica or backup") {
		t.Fatalf("without a recovery: %q", corrupt)
	}
	if got := AddRecovery(corrupt, recovery).Error(); !strings.HasSuffix(got, "from a replica or backup, or "+recovery) {
		t.Fatalf("with a recovery: %q", got)
	}
	past := fmt.Errorf("cursor: %w", &PastRetentionError{Consumer: "c", Offset: 3, FirstOffset: 9})
	if got := AddRecovery(past, recovery).Error(); !strings.HasSuffix(got, "cannot continue: "+recovery) {
		t.Fatalf("past retention with a recovery: %q", got)
	}
	other := errors.New("segmentlog: something else")
	if got := AddRecovery(other, recovery); got != other || got.Error() != "segmentlog: something else" {
		t.Fatalf("other error changed: %q", got)
	}
}
