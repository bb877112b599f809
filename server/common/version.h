// The daemon's version string, reported by GetServerInfo and --version.
#ifndef MLASERVE_SERVER_COMMON_VERSION_H_
#define MLASERVE_SERVER_COMMON_VERSION_H_

namespace mlaserve {

const char* Version();

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_COMMON_VERSION_H_
