#include "server/common/version.h"

namespace mlaserve {

const char* Version() { return "0.1.0"; }

}  // namespace mlaserve
