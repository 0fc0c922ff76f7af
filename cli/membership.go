package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newPeerCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "peer",
		Short: "Change the members of a copyset: add, remove, change, reset",
	}
	cmd.AddCommand(newPeerAddCommand(a), newPeerRemoveCommand(a), newPeerChangeCommand(a), newPeerResetCommand(a))
	return cmd
}

type membershipJSON struct {
	CopysetID
	Leader   string   `json:"leader"`
	OldPeers []string `json:"oldPeers"`
	NewPeers []string `json:"newPeers"`
	// NewReplica (peer add): "created" or "existed" for the empty replica
	// made on the new peer first; absent with --create=false.
	NewReplica string `json:"newReplica,omitempty"`
}

func printMembership(p *printer, ch MembershipChange, newReplica string) error {
	j := membershipJSON{CopysetID: ch.Copyset, Leader: ch.Leader, OldPeers: ch.OldPeers, NewPeers: ch.NewPeers, NewReplica: newReplica}
	if j.OldPeers == nil {
		j.OldPeers = []string{}
	}
	if j.NewPeers == nil {
		j.NewPeers = []string{}
	}
	row := []string{u64(uint64(ch.Copyset.Pool)), u64(uint64(ch.Copyset.Copyset)), ch.Leader,
		strings.Join(ch.OldPeers, ","), strings.Join(ch.NewPeers, ",")}
	return p.print(j, []string{"POOL", "COPYSET", "LEADER", "OLD-PEERS", "NEW-PEERS"}, [][]string{row})
}

// peerFlags are --pool, --copyset and --peer of peer add and remove.
type peerFlags struct {
	cf   copysetFlags
	peer string
}

func addPeerFlags(cmd *cobra.Command, f *peerFlags) {
	addCopysetFlags(cmd, &f.cf, false)
	cmd.Flags().StringVar(&f.peer, "peer", "", "the peer, host:port or host:port:0")
	_ = cmd.MarkFlagRequired("peer")
}

func (f *peerFlags) check() error {
	if _, err := PeerID(f.peer); err != nil {
		return fmt.Errorf("--peer: %w", err)
	}
	return nil
}

func newPeerAddCommand(a *app) *cobra.Command {
	var f peerFlags
	var create bool
	var wait waitFlag
	cmd := &cobra.Command{
		Use:   "add --pool P --copyset C --peer host:port [--create=false] [--wait [duration]]",
		Short: "Add a peer to a copyset (waits until the change has committed)",
		Long: `Adds a replica on another server in two steps. First (unless --create=false)
it sends CreateCopysetNode to the new peer with the copyset's current peers
(the replicas found on --servers), which do not include it: the server creates
an empty replica that waits to be added; one it already has is left alone.
Then it sends AddPeer to the copyset's leader, which answers once the new
configuration has committed, and prints the old and new peers. The new replica
catches up from the leader (a snapshot, then the log): with --wait [duration]
(alone: 1m) the command waits until the new replica has applied the leader's
commit index as of the change (progress on stderr) and fails if the time runs
out; without it, watch it with cluster status. Then remove the peer it
replaces. Adding a member again changes nothing in the configuration; when
that member's server has no replica (its disk was lost), the first step
re-creates it and the replica catches up: the repair of a member without a
replica. The created replica is durable before the add is proposed, and the
leader refuses to add a peer that hosts none (--create=false on a server
without a replica fails). scripts/cluster.sh add-server starts a new local
server.`,
		Args: wait.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				cs := f.cf.one()
				made := ""
				if create {
					nr, err := c.CreateEmptyReplica(ctx, cs, f.peer)
					if err != nil {
						return err
					}
					made = "created"
					if nr.Existed {
						made = "existed"
					}
				}
				ch, err := c.AddPeer(ctx, cs, f.peer)
				if err != nil {
					return err
				}
				if err := printMembership(a.printer(cmd), ch, made); err != nil {
					return err
				}
				if wait.d > 0 {
					return c.WaitCaughtUp(ctx, cs, f.peer, wait.d, cmd.ErrOrStderr())
				}
				return nil
			})
		},
	}
	addPeerFlags(cmd, &f)
	cmd.Flags().BoolVar(&create, "create", true, "first create an empty replica on the new peer (CreateCopysetNode with the current peers)")
	addWaitFlag(cmd, &wait, "then wait this long at most for the new replica to apply the leader's commit index")
	return cmd
}

func newPeerRemoveCommand(a *app) *cobra.Command {
	var f peerFlags
	cmd := &cobra.Command{
		Use:   "remove --pool P --copyset C --peer host:port",
		Short: "Remove a peer from a copyset (waits until the change has committed)",
		Long: `Sends RemovePeer to the copyset's leader, which answers once the new
configuration has committed; the removed server drops its replica (its data
goes to a trash directory that is purged later). The peer may be dead.
Removing the leader itself hands leadership to another peer afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				ch, err := c.RemovePeer(ctx, f.cf.one(), f.peer)
				if err != nil {
					return err
				}
				return printMembership(a.printer(cmd), ch, "")
			})
		},
	}
	addPeerFlags(cmd, &f)
	return cmd
}

func newPeerChangeCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var peers string
	var create bool
	cmd := &cobra.Command{
		Use:   "change --pool P --copyset C --peers host:port,... [--create=false]",
		Short: "Replace the whole configuration of a copyset (waits until it has committed)",
		Long: `Sends ChangePeers with the complete new peer list to the copyset's leader,
which answers once the change has committed; prints the old and new peers.
Unless --create=false, every new peer that has no replica yet first gets an
empty one, as with peer add.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := ParsePeerList(peers)
			if err != nil {
				return fmt.Errorf("--peers: %w", err)
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				cs := cf.one()
				if create {
					for _, p := range list {
						if _, err := c.CreateEmptyReplica(ctx, cs, p); err != nil {
							return err
						}
					}
				}
				ch, err := c.ChangePeers(ctx, cs, list)
				if err != nil {
					return err
				}
				return printMembership(a.printer(cmd), ch, "")
			})
		},
	}
	addCopysetFlags(cmd, &cf, false)
	cmd.Flags().StringVar(&peers, "peers", "", "the new peers, host:port,...")
	cmd.Flags().BoolVar(&create, "create", true, "first create an empty replica on each new peer that has none")
	_ = cmd.MarkFlagRequired("peers")
	return cmd
}

type resetJSON struct {
	CopysetID
	Server   string   `json:"server"`
	NewPeers []string `json:"newPeers"`
}

func newPeerResetCommand(a *app) *cobra.Command {
	var cf copysetFlags
	var server, peers string
	cmd := &cobra.Command{
		Use:   "reset --pool P --copyset C --server host:port --peers host:port,...",
		Short: "Forcibly reset one replica's configuration (disaster recovery, no quorum)",
		Long: `Sends ResetPeer to --server only: its replica of the copyset takes --peers as
its configuration at once, without a quorum. Use it when a majority of a
copyset's replicas is lost for good: reset a survivor to itself
(--peers = --server), let it become leader, then add new peers with peer add.
--peers must include --server. Writes the lost replicas had acknowledged but
the survivor never received are lost. --servers is not used.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := PeerID(server); err != nil {
				return fmt.Errorf("--server: %w", err)
			}
			list, err := ParsePeerList(peers)
			if err != nil {
				return fmt.Errorf("--peers: %w", err)
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				cs := cf.one()
				if err := c.ResetPeer(ctx, server, cs, list); err != nil {
					return err
				}
				self, _ := ResolvePeerID(ctx, server)
				ids, _ := resolvePeers(ctx, list)
				j := resetJSON{CopysetID: cs, Server: self, NewPeers: ids}
				row := []string{u64(uint64(cs.Pool)), u64(uint64(cs.Copyset)), self, strings.Join(ids, ",")}
				return a.printer(cmd).print(j, []string{"POOL", "COPYSET", "SERVER", "NEW-PEERS"}, [][]string{row})
			})
		},
	}
	addCopysetFlags(cmd, &cf, false)
	cmd.Flags().StringVar(&server, "server", "", "the surviving server whose replica is reset, host:port")
	cmd.Flags().StringVar(&peers, "peers", "", "its new configuration, host:port,... (must include --server)")
	_ = cmd.MarkFlagRequired("server")
	_ = cmd.MarkFlagRequired("peers")
	return cmd
}
