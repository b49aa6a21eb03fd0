// PLACEHOLDER: replaced by the engineer who owns this file.
#include "Patterns.h"
