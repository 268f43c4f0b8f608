package tlsfiles_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvtier/kvtier/internal/tlsfiles"
	"github.com/stretchr/testify/require"
)

func TestConfigNamesTheFileItCannotUse(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.crt")
	_, err := tlsfiles.Config(missing, "c", "k")
	require.ErrorContains(t, err, missing)
	empty := filepath.Join(dir, "empty.crt")
	require.NoError(t, os.WriteFile(empty, []byte("not a certificate"), 0o600))
	_, err = tlsfiles.Config(empty, "c", "k")
	require.ErrorContains(t, err, "no certificate in "+empty)
}
