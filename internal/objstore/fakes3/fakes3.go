package fakes3

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Start starts an in-memory S3 server, stopped by a t.Cleanup, and returns
// its host:port. Use it with path-style bucket lookup and any credentials.
// wrap, if non-nil, wraps the server's handler.
func Start(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	h := gofakes3.New(s3mem.New(), gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // gofakes3 is chatty about aborted uploads
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}
