/* Compiles the public header alone, as a user's C11 program would. */
#include "mzcache.h"

int main(void)
{
    mz_model_info info = {0};
    mz_status s = MZ_OK;
    return (int)s + (int)(sizeof info == 0);
}
