#include <iostream>
#include "lib/util/versions.h"
int main() { std::cout << fp8t::runtime_versions() << "\n"; return 0; }
