// The gift-fidelity command line: flag parsing, the one-step and worker
// runs, and output. Kept out of main() so that tests drive it in-process.
//
//   std::ostringstream out, err;
//   int code = RunFidelityCli({"--grad", "W.npy", "--json"}, out, err);
//
// Exit codes: 0 success (also --help), 2 any error, reported as exactly one
// line "gift-fidelity: error: <message>" on `err`.
//
// Thread safety: pure function (reads the files named).
#ifndef GIFT_TOOLS_FIDELITY_CLI_H_
#define GIFT_TOOLS_FIDELITY_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/fidelity/codec.h"
#include "tools/fidelity/inputs.h"

namespace gift::fidelity {

struct CliOptions {
  InputPaths paths;
  // Comma-separated method names. Default: see DefaultMethods().
  std::string methods;
  // e4m3, e5m2, nvfp4 or mxfp4. Default: E4M3.
  kernels::WireFormat format;
  bool json = false;
  bool help = false;
};

// The --help text.
std::string UsageText();

// Parses the arguments (without argv[0]). INVALID_ARGUMENT on unknown,
// repeated or valueless flags, positional arguments, a bad --format, or a
// missing/duplicate gradient.
absl::StatusOr<CliOptions> ParseCli(const std::vector<std::string>& args);

// Runs the tool: writes the report to `out`, errors to `err`.
int RunFidelityCli(const std::vector<std::string>& args, std::ostream& out,
                   std::ostream& err);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_CLI_H_
