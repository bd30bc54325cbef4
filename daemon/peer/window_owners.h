// Which daemon owns each layer's windows (DESIGN §4: "each selected layer
// has an owner daemon (round robin)"): the owner sums the nodes' window
// sketches, builds the factor and publishes it to every member.
//
// The leader spreads the layers that are sketched (candidates and GIFT-path
// layers, the only ones with windows) over the members: each such layer
// keeps its owner while that member stays, a new one goes to the member
// that owns the fewest, and when the member list changes the leader moves
// layers from the busiest members to the idlest until they differ by at most
// one. The plan carries each sketched layer's owner (PeerLayerPlan.owner, a
// node name); every member sends its windows where its plan says. A layer
// without an owner in the plan (not sketched, or a plan from an older
// leader) is owned by members[i % size].
//
// Before, ownership was members[i % size] for every layer: a model whose
// blocks have as many layers as the job has nodes put every layer of one
// kind (the usual GIFT selection, e.g. each block's MLP output) on one
// daemon, which then received all the windows and sent all the factors.
//
//   WindowOwners owners;                   // the leader's, kept across plans
//   owners.Assign(plan);                   // plan has its members
//   owners.Adopt(leaders_plan);            // a follower, ready to lead
//   v1::Member m = OwnerIn(plan.members(), OwnersOf(plan), i, self);
//
// Thread safety: WindowOwners is not thread-safe (the link calls it under
// its lock); the free functions are pure.
#ifndef GIFT_DAEMON_PEER_WINDOW_OWNERS_H_
#define GIFT_DAEMON_PEER_WINDOW_OWNERS_H_

#include <map>
#include <string>
#include <vector>

#include "gift/v1/peer.pb.h"

namespace gift::daemon {

class WindowOwners {
 public:
  // Sets the owner of every sketched layer of `plan` among plan.members()
  // (by node) and clears it on the others. Does nothing without members.
  void Assign(v1::PeerPlan& plan);

  // Takes the owners and members a leader's `plan` names (a follower, for
  // each plan it adopts), so that when this daemon becomes the leader its
  // first Assign keeps them: only the layers of members that left move.
  // Does nothing for a plan without layers.
  void Adopt(const v1::PeerPlan& plan);

 private:
  std::map<std::string, std::string> owner_;  // layer -> node
  std::vector<std::string> last_members_;     // nodes, in order
};

// True for a layer that has windows: a candidate or a GIFT-path layer.
bool Sketched(const v1::PeerLayerPlan& l);

// The owner node the plan names for each layer, by layer index ("" where it
// names none).
std::vector<std::string> OwnersOf(const v1::PeerPlan& plan);

// The owner of layer `i`: the member whose node `owners[i]` names, else
// members[i % size]; `self` when there are no members.
template <typename Members>
v1::Member OwnerIn(const Members& members,
                   const std::vector<std::string>& owners, int i,
                   const v1::Member& self) {
  if (members.empty() || i < 0) return self;
  if (static_cast<size_t>(i) < owners.size() && !owners[i].empty()) {
    for (const v1::Member& m : members) {
      if (m.node() == owners[i]) return m;
    }
  }
  return members[static_cast<int>(static_cast<size_t>(i) % members.size())];
}

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_PEER_WINDOW_OWNERS_H_
