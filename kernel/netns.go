package kernel

// netnsDir is where iproute2 keeps named network namespaces.
const netnsDir = "/run/netns"
