/* wall_probe.c — one CLI translation unit that includes OKV_WALL_HEADER
 * after cli.h. tests/cli/CMakeLists.txt compiles it with the CLI's own
 * flags (okv_cli_target) once per header of src/<layer>/: each must fail
 * because the CLI sees include/ and src/cli only, and once with a public
 * header, which must compile (so the failures are the wall, not broken
 * flags). check_wall.cmake runs the compiles and judges them. */
#include "cli.h"
#include OKV_WALL_HEADER

int okv_cli_wall_probe(void);
int okv_cli_wall_probe(void) { return 0; }
