//go:build !(linux && (amd64 || arm64))

package launch

import "context"

// enterOnThread is not had here (faccessat2's number is checked only on
// amd64 and arm64): checkDir asks a child process.
func enterOnThread(_ context.Context, _ User, _ string, release func()) (error, bool) {
	release()
	return nil, false
}
