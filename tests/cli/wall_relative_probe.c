/* wall_relative_probe.c — a CLI translation unit that reaches a layer's
 * internal header by relative path, the road cli_wall's probes cannot
 * close: the compiler resolves "../../src/common/okv_buf.h" against this
 * file's folder whatever -I says, and okv_buf.h needs nothing else, so this
 * compiles with the CLI's flags. ctest cli_include_wall_probe requires
 * check_includes.cmake to refuse it, naming the header. Never built. */
#include "cli.h"
#include "../../src/common/okv_buf.h"

int okv_cli_wall_relative_probe(void);
int okv_cli_wall_relative_probe(void) { return 0; }
