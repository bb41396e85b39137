package cluster

import (
	"fmt"

	"github.com/clusterlab/clusterlab/service"
)

// AddNode adds a node to a running cluster (a new machine joining): its network, its
// Node object in the store, and its proxy. Its index among the nodes picks its default
// IPs and pod CIDRs, so they do not collide with existing nodes'.
func (c *Cluster) AddNode(nc NodeConfig) (n *Node, err error) {
	c.Do(func() { n, err = c.addNode(nc) })
	return n, err
}

func (c *Cluster) addNode(nc NodeConfig) (*Node, error) {
	nn, err := c.Network.AddNode(nc.network())
	if err != nil {
		return nil, err
	}
	n := c.newNode(nn, nc)
	c.mu.Lock()
	c.nodes[nc.Name] = n
	c.mu.Unlock()
	c.policyNodeAdded(n)
	if _, err := c.store.Create(n.nodeObject()); err != nil {
		return nil, fmt.Errorf("add node %s: %w", nc.Name, err)
	}
	if c.cfg.Proxy != nil {
		p, err := c.cfg.Proxy(n)
		if err != nil {
			return nil, fmt.Errorf("add node %s: proxy: %w", nc.Name, err)
		}
		n.proxy = p
		n.syncNow()
	}
	return n, nil
}

// RemoveNode takes a node out of the cluster: it dies (its pods with it), its pods and
// Node object are deleted from the store, and the cluster network forgets its routes.
func (c *Cluster) RemoveNode(name string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("remove node: no node %q", name)
	}
	if err := c.KillNode(name); err != nil {
		return err
	}
	for _, p := range c.store.ListPods() {
		if p.Spec.NodeName == name {
			if err := c.store.Delete(service.KindPod, p.Namespace, p.Name); err != nil {
				return fmt.Errorf("remove node %s: %w", name, err)
			}
		}
	}
	if err := c.store.Delete(service.KindNode, "", name); err != nil {
		return fmt.Errorf("remove node %s: %w", name, err)
	}
	if err := c.Network.RemoveNode(name); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.nodes, name)
	c.mu.Unlock()
	return nil
}
