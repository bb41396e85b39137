package kubeproxy

// Property tests here start from a fixed seed unless -rapid.seed is given.
import _ "github.com/clusterlab/clusterlab/internal/fixedseed"
