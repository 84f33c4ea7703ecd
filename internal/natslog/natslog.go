// Package natslog hands an embedded NATS server's log to slog, for the
// hub and a site's cluster alike: its refusals (a wrong credential, a
// route whose certificate is not ours) are warnings, its notices at the
// level the caller gives.
package natslog

import (
	"context"
	"fmt"
	"log/slog"
)

// Logger is a nats-server Logger (server.Logger) writing to Log, each
// line begun with Prefix ("nats: "), notices at Notice.
type Logger struct {
	Log    *slog.Logger
	Prefix string
	Notice slog.Level
}

func (l Logger) line(level slog.Level, format string, v []any) {
	l.Log.Log(context.Background(), level, l.Prefix+fmt.Sprintf(format, v...))
}

func (l Logger) Noticef(format string, v ...any) { l.line(l.Notice, format, v) }
func (l Logger) Warnf(format string, v ...any)   { l.line(slog.LevelWarn, format, v) }
func (l Logger) Fatalf(format string, v ...any)  { l.line(slog.LevelError, format, v) }
func (l Logger) Errorf(format string, v ...any)  { l.line(slog.LevelWarn, format, v) }
func (l Logger) Debugf(format string, v ...any)  { l.line(slog.LevelDebug, format, v) }
func (l Logger) Tracef(format string, v ...any)  { l.line(slog.LevelDebug, format, v) }
