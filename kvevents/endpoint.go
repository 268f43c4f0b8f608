package kvevents

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/go-zeromq/zmq4"
)

// checkEndpoint reports, as an error wrapping ErrInvalidOptions that names
// option field, whether ep is not an endpoint zmq4 can parse:
// "transport://address" with a transport zmq4 knows ("tcp", "ipc",
// "inproc", ...), and for tcp and udp a host:port whose port is a number
// up to 65535, "*" or empty. An endpoint that parses may still fail to
// bind or connect (an address in use, a host that does not resolve): that
// error is the socket's, not an invalid option.
func checkEndpoint(field, ep string) error {
	network, addr, ok := strings.Cut(ep, "://")
	if !ok || strings.Contains(addr, "://") || !slices.Contains(zmq4.Transports(), network) {
		return fmt.Errorf("%w: %s %q is not transport://address with a transport among %v", ErrInvalidOptions, field, ep, zmq4.Transports())
	}
	if network != "tcp" && network != "udp" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrInvalidOptions, field, ep, err)
	}
	if port == "" || port == "*" {
		return nil
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%w: %s %q: port %q is not a number up to 65535", ErrInvalidOptions, field, ep, port)
	}
	return nil
}
