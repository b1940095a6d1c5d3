package topology

// The actions on a node's gossip keyring, as the GossipKeys RPC names them
// and the cluster runtime runs them.
const (
	KeyringList    = "list"    // the keys, the primary first
	KeyringInstall = "install" // add a key that decrypts
	KeyringUse     = "use"     // make an installed key the primary
	KeyringRemove  = "remove"  // remove a key that is not the primary
)
