package temporal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/temporalio/ui-server/v2/server/api"
	"github.com/temporalio/ui-server/v2/server/auth"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/cors"
	"github.com/temporalio/ui-server/v2/server/csrf"
	"github.com/temporalio/ui-server/v2/server/headers"
	"github.com/temporalio/ui-server/v2/server/route"
	"github.com/temporalio/ui-server/v2/ui"
)

// uiServer is the Temporal Web UI served over an HTTP server we own.
//
// ui-server's own Server type is not used: it binds its address itself and,
// when that fails, calls the echo logger's Fatal, which exits the process.
// Assembling the same routes and middleware from ui-server's exported
// packages lets us serve on a listener bound before the server is built (so
// a picked port cannot be lost to a race, and a taken one is an error from
// Start) and shut it down cleanly.
//
// One leak remains: route.SetAPIRoutes dials the frontend with a gRPC client
// connection it never exposes, so it outlives stop (idle, or retrying the
// closed frontend port with backoff) until the process exits.
type uiServer struct {
	srv  *http.Server
	done chan struct{} // closed when Serve returns
}

// startUI serves the Web UI on ln, for the Temporal frontend at
// frontendAddr. It takes ownership of ln.
func startUI(ln net.Listener, frontendAddr, defaultNamespace string, logger *slog.Logger) (*uiServer, error) {
	addr := ln.Addr().(*net.TCPAddr)
	cfg := &uiconfig.Config{
		TemporalGRPCAddress: frontendAddr,
		Host:                addr.IP.String(),
		Port:                addr.Port,
		EnableUI:            true,
		DefaultNamespace:    defaultNamespace,
		// Served over plain HTTP on a local address.
		CORS:     uiconfig.CORS{CookieInsecure: true},
		HideLogs: true,
		// No internet access is assumed: no news, no release checks.
		DisableNewsFetch:   true,
		NotifyOnNewVersion: false,
	}
	// With a zero RefreshInterval the provider starts no goroutine.
	provider, err := uiconfig.NewConfigProviderWithRefresh(cfg)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("temporal ui: %w", err)
	}

	forwarded := []string{auth.AuthorizationExtrasHeader, "Caller-Type"}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.Recover())
	e.Use(middleware.Gzip())
	e.Use(cors.CORSMiddleware(cors.CORSConfig{
		AllowHeaders: append([]string{
			echo.HeaderOrigin, echo.HeaderContentType, echo.HeaderAccept,
			echo.HeaderXCSRFToken, echo.HeaderAuthorization,
		}, forwarded...),
		AllowCredentials: true,
		ConfigProvider:   provider,
	}))
	e.Use(middleware.Secure())
	e.Use(csrf.EnsureTokenCookie(false))
	e.Use(middleware.CSRFWithConfig(csrf.MiddlewareConfig(provider, false)))

	route.SetHealthRoute(e)
	if err := route.SetAPIRoutes(e, provider, []api.Middleware{headers.WithForwardHeaders(forwarded)}); err != nil {
		ln.Close()
		return nil, fmt.Errorf("temporal ui: %w", err)
	}
	assets, err := ui.Assets()
	if err == nil {
		assets, err = fs.Sub(assets, "local")
	}
	if err == nil {
		err = route.SetUIRoutes(e, "", assets, provider)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("temporal ui: assets: %w", err)
	}
	route.SetRenderRoute(e, "/")

	s := &uiServer{
		srv: &http.Server{
			Handler:           e,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelError),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("temporal ui stopped", "error", err)
		}
	}()
	return s, nil
}

// stop closes the listener and every connection, and waits for Serve to
// return. The UI holds long-polling requests open, so it does not wait for
// them to finish.
func (s *uiServer) stop() error {
	err := s.srv.Close()
	<-s.done
	return err
}

// waitHTTP polls url until it answers 200 OK.
func waitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("temporal ui did not answer: %w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
