// Minimal cuBLAS shim: the few calls the harness makes, resolved with dlopen at run time, so the harness can be
// built on a machine without the cuBLAS headers / libraries (the GPU machine has libcublas.so.13).
#pragma once
#include <dlfcn.h>
#include <library_types.h>
#include <cstdio>
#include <cstdlib>
typedef struct cublasContext* cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
struct ShimCublas {
    cublasStatus_t (*create)(cublasHandle_t*);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*gemmex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                             const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                             cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    ShimCublas() {
        void* h = dlopen("libcublas.so.13", RTLD_NOW);
        if (!h) h = dlopen("libcublas.so", RTLD_NOW);
        if (!h) { fprintf(stderr, "cannot load cuBLAS: %s\n", dlerror()); exit(3); }
        create = (decltype(create))dlsym(h, "cublasCreate_v2");
        destroy = (decltype(destroy))dlsym(h, "cublasDestroy_v2");
        gemmex = (decltype(gemmex))dlsym(h, "cublasGemmEx");
        if (!create || !destroy || !gemmex) { fprintf(stderr, "cuBLAS symbols missing\n"); exit(3); }
    }
};
static ShimCublas& shim_cublas() { static ShimCublas s; return s; }
#define cublasCreate(h) shim_cublas().create(h)
#define cublasDestroy(h) shim_cublas().destroy(h)
#define cublasGemmEx(...) shim_cublas().gemmex(__VA_ARGS__)
