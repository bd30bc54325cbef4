#include "daemon/coord/etcd_client.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/net.h"
#include "common/status_macros.h"
#include "daemon/coord/http_post.h"
#include "daemon/log.h"
#include "nlohmann/json.hpp"

namespace gift::daemon::coord {
namespace {

using json = nlohmann::json;

// ---- untrusted JSON ------------------------------------------------------

absl::StatusOr<json> ParseObject(absl::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError("not JSON");
  if (!j.is_object()) return absl::InternalError("not a JSON object");
  return j;
}

// etcd's int64 fields are JSON strings; proto3 JSON omits zero values.
absl::StatusOr<int64_t> Int64Field(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return 0;
  int64_t v = 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string() &&
      absl::SimpleAtoi(it->get_ref<const std::string&>(), &v)) {
    return v;
  }
  return absl::InternalError(
      absl::StrCat("field '", name, "' is not an int64"));
}

absl::StatusOr<std::string> BytesField(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return std::string();
  std::string out;
  if (!it->is_string() ||
      !absl::Base64Unescape(it->get_ref<const std::string&>(), &out)) {
    return absl::InternalError(
        absl::StrCat("field '", name, "' is not base64"));
  }
  return out;
}

absl::StatusOr<KeyValue> ParseKv(const json& o) {
  if (!o.is_object()) return absl::InternalError("a kv is not an object");
  KeyValue kv;
  ASSIGN_OR_RETURN(kv.key, BytesField(o, "key"));
  ASSIGN_OR_RETURN(kv.value, BytesField(o, "value"));
  ASSIGN_OR_RETURN(kv.create_revision, Int64Field(o, "create_revision"));
  ASSIGN_OR_RETURN(kv.mod_revision, Int64Field(o, "mod_revision"));
  ASSIGN_OR_RETURN(kv.version, Int64Field(o, "version"));
  ASSIGN_OR_RETURN(kv.lease, Int64Field(o, "lease"));
  if (kv.key.empty()) return absl::InternalError("a kv without a key");
  return kv;
}

absl::StatusOr<std::vector<KeyValue>> ParseKvs(const json& o) {
  std::vector<KeyValue> kvs;
  auto it = o.find("kvs");
  if (it == o.end() || it->is_null()) return kvs;
  if (!it->is_array()) return absl::InternalError("field 'kvs' is not a list");
  for (const json& e : *it) {
    ASSIGN_OR_RETURN(KeyValue kv, ParseKv(e));
    kvs.push_back(std::move(kv));
  }
  return kvs;
}

absl::StatusOr<int64_t> HeaderRevision(const json& o) {
  auto it = o.find("header");
  if (it == o.end() || !it->is_object()) {
    return absl::InternalError("no 'header' object");
  }
  return Int64Field(*it, "revision");
}

// The Status of an etcd error body: {"error": "...", "code": N} (unary) or
// {"error": {"grpc_code": N, "message": "..."}} (a stream).
absl::Status ErrorOf(const json& o, long http_status) {  // NOLINT
  const json* e = &o;
  auto it = o.find("error");
  if (it != o.end() && it->is_object()) e = &*it;
  int64_t code = 0;
  for (const char* name : {"code", "grpc_code"}) {
    auto c = e->find(name);
    if (c != e->end() && c->is_number_integer()) code = c->get<int64_t>();
  }
  std::string message = absl::StrCat("HTTP ", http_status);
  for (const char* name : {"message", "error"}) {
    auto m = e->find(name);
    if (m != e->end() && m->is_string()) {
      message = Clip(m->get_ref<const std::string&>());
      break;
    }
  }
  if (code <= 0 || code > 16) {
    code =
        static_cast<int64_t>(http_status >= 500 ? absl::StatusCode::kUnavailable
                                                : absl::StatusCode::kUnknown);
  }
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

// The Status of a non-2xx answer, JSON or not (a proxy's error page).
absl::Status HttpError(const HttpResponse& r) {
  auto o = ParseObject(r.body);
  if (o.ok()) return ErrorOf(*o, r.status);
  return absl::Status(r.status >= 500 ? absl::StatusCode::kUnavailable
                                      : absl::StatusCode::kUnknown,
                      absl::StrCat("HTTP ", r.status, ": ", Clip(r.body)));
}

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// A 2xx reply's JSON object; errors name the endpoint and the call.
absl::StatusOr<json> ReplyObject(const std::string& endpoint,
                                 const std::string& path,
                                 const std::string& body) {
  auto o = ParseObject(body);
  if (!o.ok()) {
    return absl::InternalError(
        absl::StrCat("malformed answer from etcd ", endpoint, path, ": ",
                     o.status().message(), ": ", Clip(body)));
  }
  return o;
}

absl::Status Malformed(const std::string& endpoint, const std::string& path,
                       const absl::Status& s) {
  return absl::InternalError(absl::StrCat("malformed answer from etcd ",
                                          endpoint, path, ": ", s.message()));
}

std::string B64(absl::string_view s) { return absl::Base64Escape(s); }

// The end of the range of keys that start with `prefix`.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) != 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::Status CheckOptions(const EtcdOptions& o) {
  if (o.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd: no endpoints");
  }
  for (const std::string& e : o.endpoints) {
    if (!absl::StartsWith(e, "http://") && !absl::StartsWith(e, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint '", Clip(e), "' is not http(s)://host:port"));
    }
  }
  if (o.request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd: request_timeout must be > 0");
  }
  if (o.user.empty() && !o.password.empty()) {
    return absl::InvalidArgumentError("etcd: a password without a user");
  }
  return absl::OkStatus();
}

bool ValidHostPort(absl::string_view hp) {
  absl::StatusOr<net::HostPort> parsed = net::ParseHostPort(hp);
  if (!parsed.ok() || parsed->host.empty() || parsed->port < 1) return false;
  if (hp.front() == '[') return true;  // [IPv6], not checked further
  for (char c : parsed->host) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '.' && c != '_')
      return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseCoordinator(
    absl::string_view uri) {
  absl::string_view rest = uri;
  std::string scheme;
  if (absl::ConsumePrefix(&rest, "etcd://")) {
    scheme = "http://";
  } else if (absl::ConsumePrefix(&rest, "etcds://")) {
    scheme = "https://";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator '", Clip(uri),
                     "': expected etcd://host:port[,host:port...]"));
  }
  std::vector<std::string> endpoints;
  for (absl::string_view hp : absl::StrSplit(rest, ',')) {
    if (!ValidHostPort(hp)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordinator '", Clip(uri), "': '", Clip(hp), "' is not host:port"));
    }
    endpoints.push_back(absl::StrCat(scheme, hp));
  }
  return endpoints;
}

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {}
EtcdClient::~EtcdClient() = default;

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    EtcdOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<EtcdClient> client(new EtcdClient(std::move(options)));
  const EtcdOptions& o = client->options_;
  const std::string who = o.user.empty()
                              ? "without credentials"
                              : absl::StrCat("as user '", Clip(o.user), "'");
  if (!o.user.empty()) {
    std::vector<std::string> failures;
    for (const std::string& e : o.endpoints) {
      absl::Status s = client->Authenticate(e);
      if (s.ok()) break;
      if (s.code() != absl::StatusCode::kUnavailable) return s;
      failures.push_back(std::string(s.message()));
    }
    if (failures.size() == o.endpoints.size()) {
      return absl::UnavailableError(absl::StrCat(
          "etcd: no endpoint answered: ", absl::StrJoin(failures, "; ")));
    }
  }
  // A read checks reachability, the credentials and the read permission.
  auto probe = client->Get("/gift/jobs/");
  if (probe.ok()) return client;
  const absl::Status& s = probe.status();
  if (absl::StrContains(s.message(), "user name is empty")) {
    return absl::UnauthenticatedError(absl::StrCat(
        "etcd requires authentication (set the coordinator's user and "
        "password): ",
        s.message()));
  }
  if (s.code() == absl::StatusCode::kPermissionDenied ||
      s.code() == absl::StatusCode::kUnauthenticated) {
    return absl::Status(
        s.code(), absl::StrCat("etcd refuses a read ", who, ": ", s.message()));
  }
  return s;
}

absl::Status EtcdClient::Authenticate(const std::string& endpoint) {
  const std::string path = "/v3/auth/authenticate";
  json req = {{"name", options_.user}, {"password", options_.password}};
  ASSIGN_OR_RETURN(HttpResponse r,
                   HttpPost({endpoint + path, req.dump(), "", options_.ca_file,
                             options_.cert_file, options_.key_file,
                             options_.request_timeout}));
  if (r.status < 200 || r.status > 299) {
    absl::Status s = HttpError(r);
    if (s.code() == absl::StatusCode::kUnavailable) {
      return Prefixed(s, endpoint + ": ");
    }
    // etcd answers wrong credentials with INVALID_ARGUMENT.
    return absl::UnauthenticatedError(
        absl::StrCat("etcd at ", endpoint, " refused user '",
                     Clip(options_.user), "': ", s.message()));
  }
  ASSIGN_OR_RETURN(json o, ReplyObject(endpoint, path, r.body));
  auto token = o.find("token");
  if (token == o.end() || !token->is_string() ||
      token->get_ref<const std::string&>().empty()) {
    return Malformed(endpoint, path, absl::InternalError("no token"));
  }
  absl::MutexLock lock(&mu_);
  token_ = token->get<std::string>();
  return absl::OkStatus();
}

absl::StatusOr<EtcdClient::Reply> EtcdClient::Post(const std::string& path,
                                                   const std::string& body) {
  const size_t n = options_.endpoints.size();
  size_t first;
  {
    absl::MutexLock lock(&mu_);
    first = preferred_;
  }
  std::vector<std::string> failures;
  for (size_t i = 0; i < n; ++i) {
    const std::string& endpoint = options_.endpoints[(first + i) % n];
    absl::Status s;
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::string token;
      {
        absl::MutexLock lock(&mu_);
        token = token_;
      }
      auto r = HttpPost({endpoint + path, body, token, options_.ca_file,
                         options_.cert_file, options_.key_file,
                         options_.request_timeout});
      if (!r.ok()) {
        s = r.status();
        break;
      }
      if (r->status >= 200 && r->status <= 299) {
        absl::MutexLock lock(&mu_);
        preferred_ = (first + i) % n;
        return Reply{endpoint, std::move(r->body)};
      }
      s = Prefixed(HttpError(*r), absl::StrCat("etcd ", endpoint, path, ": "));
      // An expired token: log in again once and repeat the call.
      if (s.code() != absl::StatusCode::kUnauthenticated ||
          options_.user.empty() || attempt > 0) {
        break;
      }
      RETURN_IF_ERROR(Authenticate(endpoint));
    }
    if (s.code() != absl::StatusCode::kUnavailable) return s;
    failures.push_back(std::string(s.message()));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd: no endpoint answered ", path, " (tried ",
                   absl::StrJoin(options_.endpoints, ", "),
                   "): ", absl::StrJoin(failures, "; ")));
}

absl::StatusOr<int64_t> EtcdClient::LeaseGrant(absl::Duration ttl) {
  const std::string path = "/v3/lease/grant";
  const int64_t seconds = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(ttl))));
  ASSIGN_OR_RETURN(Reply r, Post(path, json({{"TTL", seconds}}).dump()));
  ASSIGN_OR_RETURN(json o, ReplyObject(r.endpoint, path, r.body));
  auto id = Int64Field(o, "ID");
  if (!id.ok()) return Malformed(r.endpoint, path, id.status());
  if (*id == 0)
    return Malformed(r.endpoint, path, absl::InternalError("no lease ID"));
  return *id;
}

absl::StatusOr<absl::Duration> EtcdClient::LeaseKeepAlive(int64_t lease) {
  const std::string path = "/v3/lease/keepalive";
  ASSIGN_OR_RETURN(Reply r,
                   Post(path, json({{"ID", std::to_string(lease)}}).dump()));
  // A stream of one answer: {"result": {...}} or {"error": {...}}.
  ASSIGN_OR_RETURN(json o, ReplyObject(r.endpoint, path, r.body));
  if (o.contains("error")) {
    return Prefixed(ErrorOf(o, 200),
                    absl::StrCat("etcd ", r.endpoint, path, ": "));
  }
  auto result = o.find("result");
  if (result == o.end() || !result->is_object()) {
    return Malformed(r.endpoint, path,
                     absl::InternalError("no 'result' object"));
  }
  auto ttl = Int64Field(*result, "TTL");
  if (!ttl.ok()) return Malformed(r.endpoint, path, ttl.status());
  return absl::Seconds(std::max<int64_t>(0, *ttl));
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease) {
  const std::string path = "/v3/lease/revoke";
  ASSIGN_OR_RETURN(Reply r,
                   Post(path, json({{"ID", std::to_string(lease)}}).dump()));
  return ReplyObject(r.endpoint, path, r.body).status();
}

absl::StatusOr<int64_t> EtcdClient::Put(absl::string_view key,
                                        absl::string_view value,
                                        int64_t lease) {
  const std::string path = "/v3/kv/put";
  json req = {{"key", B64(key)}, {"value", B64(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  ASSIGN_OR_RETURN(Reply r, Post(path, req.dump()));
  ASSIGN_OR_RETURN(json o, ReplyObject(r.endpoint, path, r.body));
  auto revision = HeaderRevision(o);
  if (!revision.ok()) return Malformed(r.endpoint, path, revision.status());
  return *revision;
}

absl::StatusOr<std::optional<KeyValue>> EtcdClient::Get(absl::string_view key) {
  const std::string path = "/v3/kv/range";
  ASSIGN_OR_RETURN(Reply r, Post(path, json({{"key", B64(key)}}).dump()));
  ASSIGN_OR_RETURN(json o, ReplyObject(r.endpoint, path, r.body));
  auto kvs = ParseKvs(o);
  if (!kvs.ok()) return Malformed(r.endpoint, path, kvs.status());
  if (kvs->empty()) return std::nullopt;
  if (kvs->size() > 1 || (*kvs)[0].key != key) {
    return Malformed(r.endpoint, path, absl::InternalError("another key"));
  }
  return std::move((*kvs)[0]);
}

absl::StatusOr<std::vector<KeyValue>> EtcdClient::GetPrefix(
    absl::string_view prefix) {
  const std::string path = "/v3/kv/range";
  json req = {{"key", B64(prefix)},
              {"range_end", B64(PrefixEnd(std::string(prefix)))}};
  ASSIGN_OR_RETURN(Reply r, Post(path, req.dump()));
  ASSIGN_OR_RETURN(json o, ReplyObject(r.endpoint, path, r.body));
  auto kvs = ParseKvs(o);
  if (!kvs.ok()) return Malformed(r.endpoint, path, kvs.status());
  for (const KeyValue& kv : *kvs) {
    if (!absl::StartsWith(kv.key, prefix)) {
      return Malformed(r.endpoint, path,
                       absl::InternalError("a key outside the prefix"));
    }
  }
  return kvs;
}

absl::StatusOr<TxnResult> EtcdClient::CreateIfAbsent(absl::string_view key,
                                                     absl::string_view value,
                                                     int64_t lease) {
  const std::string path = "/v3/kv/txn";
  json put = {{"key", B64(key)}, {"value", B64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  json req = {
      {"compare", json::array({{{"key", B64(key)},
                                {"target", "CREATE"},
                                {"result", "EQUAL"},
                                {"create_revision", "0"}}})},
      {"success", json::array({{{"request_put", put}}})},
      {"failure", json::array({{{"request_range", {{"key", B64(key)}}}}})}};
  ASSIGN_OR_RETURN(Reply r, Post(path, req.dump()));
  ASSIGN_OR_RETURN(json o, ReplyObject(r.endpoint, path, r.body));
  auto parse = [&]() -> absl::StatusOr<TxnResult> {
    TxnResult t;
    ASSIGN_OR_RETURN(t.revision, HeaderRevision(o));
    auto succeeded = o.find("succeeded");
    if (succeeded != o.end() && !succeeded->is_boolean()) {
      return absl::InternalError("field 'succeeded' is not a bool");
    }
    t.succeeded = succeeded != o.end() && succeeded->get<bool>();
    if (t.succeeded) {
      t.holder = KeyValue{std::string(key),
                          std::string(value),
                          t.revision,
                          t.revision,
                          1,
                          lease};
      return t;
    }
    auto responses = o.find("responses");
    if (responses == o.end() || !responses->is_array() ||
        responses->size() != 1 || !(*responses)[0].is_object()) {
      return absl::InternalError("no list of one response");
    }
    auto range = (*responses)[0].find("response_range");
    if (range == (*responses)[0].end() || !range->is_object()) {
      return absl::InternalError("no 'response_range'");
    }
    ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, ParseKvs(*range));
    if (kvs.size() > 1 || (kvs.size() == 1 && kvs[0].key != key)) {
      return absl::InternalError("another key");
    }
    if (!kvs.empty()) t.holder = std::move(kvs[0]);
    return t;
  };
  auto t = parse();
  if (!t.ok()) return Malformed(r.endpoint, path, t.status());
  return t;
}

absl::StatusOr<int64_t> EtcdClient::Delete(absl::string_view key) {
  const std::string path = "/v3/kv/deleterange";
  ASSIGN_OR_RETURN(Reply r, Post(path, json({{"key", B64(key)}}).dump()));
  ASSIGN_OR_RETURN(json o, ReplyObject(r.endpoint, path, r.body));
  auto deleted = Int64Field(o, "deleted");
  if (!deleted.ok()) return Malformed(r.endpoint, path, deleted.status());
  return *deleted;
}

}  // namespace gift::daemon::coord
