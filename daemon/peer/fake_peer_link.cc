#include "daemon/peer/fake_peer_link.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace gift::daemon {

// One daemon's end of the fake network.
class FakePeerLink : public PeerLink {
 public:
  FakePeerLink(FakePeerNetwork* net, PeerLinkOptions o, std::string address)
      : net_(net), o_(std::move(o)), address_(std::move(address)) {
    self_.set_node(o_.node);
    self_.set_address(address_);
    self_.set_instance(o_.instance);
  }
  ~FakePeerLink() override { Stop(); }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    net_->Unregister(address_);
  }
  bool is_leader() const override { return address_ == o_.leader_address; }
  std::string bound_address() const override { return address_; }
  const v1::Member& self() const { return self_; }

  std::vector<v1::Member> members() const override {
    if (is_leader()) return net_->Members();
    absl::MutexLock lock(&mu_);
    return plan_members_;
  }
  v1::Member OwnerOf(int layer_index) const override {
    std::vector<std::string> owners;
    if (is_leader()) {
      owners = net_->Owners();
    } else {
      absl::MutexLock lock(&mu_);
      owners = plan_owners_;
    }
    return OwnerIn(members(), owners, layer_index, self_);
  }
  bool IsSelf(const v1::Member& m) const override {
    return m.address() == address_;
  }
  void SetPlan(const v1::PeerPlan& plan) override {
    absl::MutexLock lock(&mu_);
    plan_members_.assign(plan.members().begin(), plan.members().end());
    if (plan.layers_size() > 0) plan_owners_ = OwnersOf(plan);
    joined_ = true;
  }

  void SendTelemetry(v1::ReportTelemetryRequest r) override {
    r.mutable_self()->set_address(address_);
    Send(o_.leader_address, [r = std::move(r)](FakePeerNetwork::Endpoint& e) {
      return e.handler->OnTelemetry(r);
    });
  }
  void BroadcastPlan(v1::PeerPlan plan) override {
    net_->CompletePlan(plan, o_.instance);
    for (const v1::Member& m : plan.members()) {
      if (IsSelf(m)) continue;
      Send(m.address(), [plan](FakePeerNetwork::Endpoint& e) {
        e.link->SetPlan(plan);  // the real link learns members the same way
        return e.handler->OnPlan(plan);
      });
    }
  }
  void SendSketch(const v1::Member& owner, v1::PushSketchRequest r) override {
    Send(owner.address(), [r = std::move(r)](FakePeerNetwork::Endpoint& e) {
      return e.handler->OnSketch(r);
    });
  }
  void BroadcastFactor(v1::PublishFactorRequest r) override {
    for (const v1::Member& m : members()) SendFactor(m, r);
  }
  void SendFactor(const v1::Member& to, v1::PublishFactorRequest r) override {
    if (IsSelf(to)) return;
    Send(to.address(), [r = std::move(r)](FakePeerNetwork::Endpoint& e) {
      return e.handler->OnFactor(r);
    });
  }

  absl::StatusOr<v1::ForwardControlResponse> ForwardControl(
      const v1::ForwardControlRequest& r) override {
    return Ask<v1::ForwardControlResponse>(
        [&r](PeerHandler* h) { return h->OnControl(r); });
  }
  absl::Status StoreSet(const v1::StoreSetRequest& r) override {
    return net_->Call(address_, o_.leader_address,
                      [&r](FakePeerNetwork::Endpoint& e) {
                        return e.handler->OnStoreSet(r);
                      });
  }
  absl::StatusOr<v1::StoreGetResponse> StoreGet(
      const v1::StoreGetRequest& r) override {
    return Ask<v1::StoreGetResponse>([&r](PeerHandler* h) {
      return h->OnStoreGet(r, absl::Milliseconds(r.timeout_ms()));
    });
  }
  absl::StatusOr<v1::StoreAddResponse> StoreAdd(
      const v1::StoreAddRequest& r) override {
    return Ask<v1::StoreAddResponse>(
        [&r](PeerHandler* h) { return h->OnStoreAdd(r); });
  }

  PeerLinkStats stats() const override {
    PeerLinkStats s;
    absl::MutexLock lock(&mu_);
    s.connected = is_leader() || joined_;
    s.dropped = net_->dropped();
    return s;
  }

 private:
  void Send(const std::string& to, FakePeerNetwork::Call_t fn) {
    net_->Post([net = net_, from = address_, to, fn = std::move(fn)] {
      net->Call(from, to, fn).IgnoreError();
    });
  }
  // A blocking call to the leader.
  template <typename T, typename F>
  absl::StatusOr<T> Ask(F fn) {
    absl::StatusOr<T> out = absl::UnknownError("no answer");
    RETURN_IF_ERROR(net_->Call(address_, o_.leader_address,
                               [&](FakePeerNetwork::Endpoint& e) {
                                 out = fn(e.handler);
                                 return absl::OkStatus();
                               }));
    return out;
  }

  FakePeerNetwork* const net_;
  const PeerLinkOptions o_;
  const std::string address_;
  v1::Member self_;
  std::atomic<bool> stopped_{false};
  mutable absl::Mutex mu_;
  std::vector<v1::Member> plan_members_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> plan_owners_ ABSL_GUARDED_BY(mu_);
  bool joined_ ABSL_GUARDED_BY(mu_) = false;
};

// ---- the network ----------------------------------------------------------

FakePeerNetwork::FakePeerNetwork() : thread_([this] { Deliver(); }) {}

FakePeerNetwork::~FakePeerNetwork() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

FakePeerNetwork::Factory_t FakePeerNetwork::Factory() {
  return [this](const PeerLinkOptions& o, PeerHandler* handler)
             -> absl::StatusOr<std::unique_ptr<PeerLink>> {
    const std::string address =
        o.advertise_address.empty() ? o.listen_address : o.advertise_address;
    if (address.empty() || o.leader_address.empty() || o.job_id.empty() ||
        o.token.empty()) {
      return absl::InvalidArgumentError(
          "fake peer link: address, leader, job id and token are required");
    }
    auto link = std::make_unique<FakePeerLink>(this, o, address);
    auto e = std::make_shared<Endpoint>();
    e->address = address;
    e->handler = handler;
    e->link = link.get();
    e->self = link->self();
    RETURN_IF_ERROR(Register(e));
    {
      absl::MutexLock lock(&mu_);
      leader_of_[address] = o.leader_address;
    }
    if (!link->is_leader()) Rejoin(address);
    return link;
  };
}

absl::Status FakePeerNetwork::Register(std::shared_ptr<Endpoint> e) {
  absl::MutexLock lock(&mu_);
  if (endpoints_.count(e->address) != 0) {
    return absl::AlreadyExistsError(
        absl::StrFormat("fake peer address %s is taken", e->address));
  }
  if (e->link->is_leader()) {
    members_.erase(std::remove_if(members_.begin(), members_.end(),
                                  [&](const v1::Member& m) {
                                    return m.address() == e->address;
                                  }),
                   members_.end());
    members_.insert(members_.begin(), e->self);
  }
  endpoints_[e->address] = std::move(e);
  return absl::OkStatus();
}

void FakePeerNetwork::Unregister(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(address);
  if (it == endpoints_.end()) return;
  std::shared_ptr<Endpoint> e = it->second;
  e->alive = false;
  mu_.Await(absl::Condition(
      +[](Endpoint* e) { return e->active == 0; }, e.get()));
  endpoints_.erase(address);
}

absl::Status FakePeerNetwork::Call(const std::string& from,
                                   const std::string& to, const Call_t& fn) {
  std::shared_ptr<Endpoint> e;
  {
    absl::MutexLock lock(&mu_);
    auto it = endpoints_.find(to);
    auto src = endpoints_.find(from);
    if (cut_[from] || cut_[to] || it == endpoints_.end() ||
        !it->second->alive || src == endpoints_.end() || !src->second->alive) {
      ++dropped_;
      return absl::UnavailableError(
          absl::StrFormat("fake peer %s unreachable from %s", to, from));
    }
    e = it->second;
    ++e->active;
  }
  absl::Status st = fn(*e);
  absl::MutexLock lock(&mu_);
  --e->active;
  return st;
}

void FakePeerNetwork::Post(std::function<void()> delivery) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(delivery));
}

void FakePeerNetwork::Deliver() {
  while (true) {
    std::function<void()> next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](FakePeerNetwork* n) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return n->stop_ || !n->queue_.empty();
          },
          this));
      if (stop_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      ++delivering_;
    }
    next();
    absl::MutexLock lock(&mu_);
    --delivering_;
  }
}

bool FakePeerNetwork::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](FakePeerNetwork* n) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return n->queue_.empty() && n->delivering_ == 0;
          },
          this),
      timeout);
}

void FakePeerNetwork::SetReachable(const std::string& address, bool reachable) {
  absl::MutexLock lock(&mu_);
  cut_[address] = !reachable;
}

void FakePeerNetwork::Rejoin(const std::string& address) {
  std::string leader;
  {
    absl::MutexLock lock(&mu_);
    leader = leader_of_[address];
  }
  Post([this, address, leader] { Join(address, leader); });
}

int64_t FakePeerNetwork::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

void FakePeerNetwork::Admit(const v1::Member& m) {
  absl::MutexLock lock(&mu_);
  for (v1::Member& x : members_) {
    if (x.address() == m.address()) {
      x = m;
      return;
    }
  }
  members_.push_back(m);
}

std::vector<v1::Member> FakePeerNetwork::Members() const {
  absl::MutexLock lock(&mu_);
  return members_;
}

void FakePeerNetwork::CompletePlan(v1::PeerPlan& plan,
                                   const std::string& leader_instance) {
  absl::MutexLock lock(&mu_);
  plan.clear_members();
  for (const v1::Member& m : members_) *plan.add_members() = m;
  if (plan.layers_size() > 0) {
    window_owners_.Assign(plan);
    owners_ = OwnersOf(plan);
  }
  plan.set_leader_instance(leader_instance);
}

std::vector<std::string> FakePeerNetwork::Owners() const {
  absl::MutexLock lock(&mu_);
  return owners_;
}

// The real link's join: the follower's state to the leader, which admits
// it, answers with the plan (members filled in) and publishes a new epoch.
void FakePeerNetwork::Join(const std::string& address,
                           const std::string& leader) {
  v1::JoinRequest req;
  v1::Member self;
  absl::Status st = Call(address, address, [&](Endpoint& e) {
    req = e.handler->JoinState();
    self = e.self;
    return absl::OkStatus();
  });
  if (!st.ok()) return;
  *req.mutable_self() = self;
  Admit(self);
  absl::StatusOr<v1::PeerPlan> plan = absl::UnknownError("no answer");
  std::vector<v1::PublishFactorRequest> factors;
  std::string leader_instance;
  st = Call(address, leader, [&](Endpoint& e) {
    plan = e.handler->OnJoin(req);
    if (plan.ok()) factors = e.handler->NewestFactors();
    leader_instance = e.self.instance();
    return absl::OkStatus();
  });
  if (!st.ok() || !plan.ok()) {
    absl::MutexLock lock(&mu_);
    members_.erase(std::remove_if(members_.begin(), members_.end(),
                                  [&](const v1::Member& m) {
                                    return m.address() == address;
                                  }),
                   members_.end());
    return;
  }
  CompletePlan(*plan, leader_instance);
  Call(address, address, [&](Endpoint& e) {
    e.link->SetPlan(*plan);
    RETURN_IF_ERROR(e.handler->OnPlan(*plan));
    for (const v1::PublishFactorRequest& f : factors) {
      e.handler->OnFactor(f).IgnoreError();  // as the real link: logged there
    }
    return absl::OkStatus();
  }).IgnoreError();
  Call(address, leader, [](Endpoint& e) {
    e.handler->OnMembersChanged();
    return absl::OkStatus();
  }).IgnoreError();
}

}  // namespace gift::daemon
