/*
 * TEST TOOL (tests/fakecuda), never shipped: the build-time guarantee that
 * the fake exports every entry point cushare intercepts (src/hook/hooks.def)
 * or calls (src/hook/drv.def), with the prototype cushare expects. Each row
 * becomes a typed pointer initialised with the fake's function: a prototype
 * mismatch is a compile error (-Werror), a missing definition a link error
 * (-Wl,--no-undefined). Compiled into both fake libraries; FAKECUDA_NVML
 * selects the NVML rows.
 */
#include "fake_internal.h"
#include "fake_nvml_extra.h"

#ifndef FAKECUDA_NVML

__attribute__((used)) static const struct {
#define CS_CU(base, sym, since, variant, family, params, args) CUresult(CUDAAPI *sym) params;
#define CS_NVML(sym, family, params, args)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
    int end_;
} fc_hooks_cu = {
#define CS_CU(base, sym, since, variant, family, params, args) .sym = &sym,
#define CS_NVML(sym, family, params, args)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
    .end_ = 0,
};

#if __has_include("hook/drv.def")
__attribute__((used)) static const struct {
#define CS_DRV(sym, params) CUresult(CUDAAPI *sym) params;
#define CS_DRV_NVML(sym, params)
#include "hook/drv.def"
#undef CS_DRV
#undef CS_DRV_NVML
    int end_;
} fc_drv_cu = {
#define CS_DRV(sym, params) .sym = &sym,
#define CS_DRV_NVML(sym, params)
#include "hook/drv.def"
#undef CS_DRV
#undef CS_DRV_NVML
    .end_ = 0,
};
#endif

#else /* FAKECUDA_NVML */

__attribute__((used)) static const struct {
#define CS_CU(base, sym, since, variant, family, params, args)
#define CS_NVML(sym, family, params, args) nvmlReturn_t (*sym) params;
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
    int end_;
} fc_hooks_nvml = {
#define CS_CU(base, sym, since, variant, family, params, args)
#define CS_NVML(sym, family, params, args) .sym = &sym,
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
    .end_ = 0,
};

#if __has_include("hook/drv.def")
__attribute__((used)) static const struct {
#define CS_DRV(sym, params)
#define CS_DRV_NVML(sym, params) nvmlReturn_t (*sym) params;
#include "hook/drv.def"
#undef CS_DRV
#undef CS_DRV_NVML
    int end_;
} fc_drv_nvml = {
#define CS_DRV(sym, params)
#define CS_DRV_NVML(sym, params) .sym = &sym,
#include "hook/drv.def"
#undef CS_DRV
#undef CS_DRV_NVML
    .end_ = 0,
};
#endif

#endif
