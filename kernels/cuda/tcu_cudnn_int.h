/* tcu_cudnn_int.h — what the three parts of the cuDNN attention share (tcu_cudnn.h): the entry
 * points resolved from the library, the descriptor helpers' graph under construction.
 * tcu_cudnn_load.c opens the library, tcu_cudnn_graph.c builds the graphs, tcu_cudnn_plan.c
 * chooses engines, caches plans and executes them. Compiled only where the CUDA toolkit has
 * cudnn_graph.h (TCU_HAVE_CUDNN); elsewhere each part is a stub that reports "unavailable". */
#ifndef TCU_CUDNN_INT_H
#define TCU_CUDNN_INT_H

#include "tcu_cudnn.h"

#if defined(__has_include)
#if __has_include(<cudnn_graph.h>)
#define TCU_HAVE_CUDNN 1
#endif
#endif

#ifdef TCU_HAVE_CUDNN
#include <cudnn_graph.h>

/* X(name, return, parameters): every cuDNN function called (all through the table) */
#define CD_FUNCS(X)                                                                                \
    X(cudnnGetVersion, size_t, (void))                                                             \
    X(cudnnGetCudartVersion, size_t, (void))                                                       \
    X(cudnnGetErrorString, const char *, (cudnnStatus_t))                                          \
    X(cudnnGetLastErrorString, void, (char *, size_t))                                             \
    X(cudnnCreate, cudnnStatus_t, (cudnnHandle_t *))                                               \
    X(cudnnDestroy, cudnnStatus_t, (cudnnHandle_t))                                                \
    X(cudnnSetStream, cudnnStatus_t, (cudnnHandle_t, cudaStream_t))                                \
    X(cudnnBackendCreateDescriptor, cudnnStatus_t,                                                 \
      (cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *))                                  \
    X(cudnnBackendDestroyDescriptor, cudnnStatus_t, (cudnnBackendDescriptor_t))                    \
    X(cudnnBackendFinalize, cudnnStatus_t, (cudnnBackendDescriptor_t))                             \
    X(cudnnBackendSetAttribute, cudnnStatus_t,                                                     \
      (cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,         \
       int64_t, const void *))                                                                     \
    X(cudnnBackendGetAttribute, cudnnStatus_t,                                                     \
      (cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,   \
       int64_t, int64_t *, void *))                                                                \
    X(cudnnBackendExecute, cudnnStatus_t,                                                          \
      (cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t))

#define CD_FIELD(name, ret, params) ret(*name) params;
typedef struct cd_api {
    CD_FUNCS(CD_FIELD)
} cd_api;
#undef CD_FIELD

/* the resolved table, or NULL when tcu_cudnn_load failed */
const cd_api *cd_lib(void);
/* cuDNN's last error message into why (after a failed call named what) */
void cd_why(const char *what, cudnnStatus_t st, char *why, size_t n);

/* a graph under construction: every descriptor made (destroyed together), its operations, the
 * first failure (later calls do nothing) */
enum { CD_MAX_DESC = 160, CD_MAX_OPS = 40 };
typedef struct cd_graph {
    const cd_api *api;
    cudnnBackendDescriptor_t desc[CD_MAX_DESC];
    int ndesc;
    cudnnBackendDescriptor_t op[CD_MAX_OPS];
    int nops;
    int64_t next_uid;               /* virtual tensors' UIDs, from 100 */
    cudnnBackendDescriptor_t opgraph;
    int failed;
    char why[384];
} cd_graph;
/* builds (and finalizes) the operation graph of sh into g; handle NULL without a GPU. 0 or -1 */
int cd_graph_build(cd_graph *g, tcu_cudnn_shape sh, int bwd, cudnnHandle_t handle);
/* destroys every descriptor of g */
void cd_graph_free(cd_graph *g);
#endif

#endif
