package sitecluster

import (
	"fmt"
	"log/slog"
)

// natsLogger puts the embedded server's words in the daemon's log (its
// notices at debug: a cluster's routine is not the operator's business).
type natsLogger struct{ log *slog.Logger }

func (l natsLogger) Noticef(format string, v ...any) {
	l.log.Debug("sitecluster: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Warnf(format string, v ...any) {
	l.log.Warn("sitecluster: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Fatalf(format string, v ...any) {
	l.log.Error("sitecluster: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Errorf(format string, v ...any) {
	l.log.Error("sitecluster: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Debugf(format string, v ...any) {
	l.log.Debug("sitecluster: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Tracef(format string, v ...any) {}
