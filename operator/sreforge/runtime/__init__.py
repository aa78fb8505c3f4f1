"""Where the loop acts: `local` (processes on loopback, the embedded default) and `kube`."""
