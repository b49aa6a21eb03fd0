// PLACEHOLDER: replaced by the engineer who owns this file (see the
// frontend work split); nothing here is functional yet.
#include "moe/Frontend/ModelSpec.h"
