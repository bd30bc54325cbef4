#include "daemon/coord/http_post.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gift::daemon::coord {
namespace {

struct CurlCleanup {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistCleanup {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

size_t Append(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() + size * n > kMaxResponseBytes) return 0;  // aborts
  out->append(data, size * n);
  return size * n;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

absl::StatusOr<HttpResponse> HttpPost(const HttpRequest& r) {
  GlobalInit();
  std::unique_ptr<CURL, CurlCleanup> curl(curl_easy_init());
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  curl_slist* headers =
      curl_slist_append(nullptr, "Content-Type: application/json");
  if (!r.authorization.empty()) {
    headers = curl_slist_append(
        headers, absl::StrCat("Authorization: ", r.authorization).c_str());
  }
  std::unique_ptr<curl_slist, SlistCleanup> header_list(headers);
  HttpResponse response;
  char error[CURL_ERROR_SIZE] = {};
  const long timeout_ms =  // NOLINT(runtime/int)
      std::max<int64_t>(1, absl::ToInt64Milliseconds(r.timeout));
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, r.body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                   static_cast<curl_off_t>(r.body.size()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  if (!r.ca_file.empty())
    curl_easy_setopt(c, CURLOPT_CAINFO, r.ca_file.c_str());
  if (!r.cert_file.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, r.cert_file.c_str());
  }
  if (!r.key_file.empty())
    curl_easy_setopt(c, CURLOPT_SSLKEY, r.key_file.c_str());
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat(
        r.url, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc),
        rc == CURLE_WRITE_ERROR ? " (answer too long)" : ""));
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

}  // namespace gift::daemon::coord
