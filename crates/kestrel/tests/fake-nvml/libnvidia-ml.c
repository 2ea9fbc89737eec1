/*
 * A stand-in for NVIDIA's management library (libnvidia-ml.so.1) with two GPUs joined by
 * one NVLink, for tests on machines without a GPU: crates/kestrel/tests/agent_image.rs
 * compiles it and puts it where the NVIDIA container runtime mounts the real one.
 *
 * It implements the functions the agent's discovery calls through nvml-wrapper (see
 * crates/kestrel-agent/src/nvml.rs), with NVML's signatures and struct layouts (nvml.h);
 * every other function is absent, as a symbol missing from an older driver would be.
 */

#include <string.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_NOT_FOUND = 6,
};

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

struct fake_gpu {
    const char *uuid;
    const char *name;
    unsigned int bus;
    /* The GPU at the other end of NVLink 0. */
    unsigned int peer;
};

typedef struct fake_gpu *nvmlDevice_t;

static struct fake_gpu gpus[] = {
    {"GPU-fa4e0000-0000-4000-8000-000000000000", "Kestrel Fake H100 80GB", 0x17, 1},
    {"GPU-fa4e0000-0000-4000-8000-000000000001", "Kestrel Fake H100 80GB", 0x2a, 0},
};
#define GPU_COUNT (sizeof(gpus) / sizeof(gpus[0]))
#define MEMORY_BYTES (81559ULL * 1024 * 1024)
#define NVLINKS 2

static int initialised;

nvmlReturn_t nvmlInit_v2(void) {
    initialised++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    initialised--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    return result == NVML_SUCCESS ? "Success" : "Fake NVML error";
}

static nvmlReturn_t check(nvmlDevice_t device) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (device < gpus || device >= gpus + GPU_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy(char *out, unsigned int length, const char *text) {
    if (strlen(text) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    *count = GPU_COUNT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= GPU_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    for (unsigned int i = 0; i < GPU_COUNT; i++) {
        if (strcmp(gpus[i].uuid, uuid) == 0) {
            *device = &gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    nvmlReturn_t r = check(device);
    if (r == NVML_SUCCESS)
        *index = (unsigned int)(device - gpus);
    return r;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t r = check(device);
    return r == NVML_SUCCESS ? copy(uuid, length, device->uuid) : r;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t r = check(device);
    return r == NVML_SUCCESS ? copy(name, length, device->name) : r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = MEMORY_BYTES;
    memory->reserved = 0;
    memory->used = 0;
    memory->free = MEMORY_BYTES;
    return NVML_SUCCESS;
}

static void pci(const struct fake_gpu *gpu, nvmlPciInfo_t *info) {
    memset(info, 0, sizeof(*info));
    info->domain = 0;
    info->bus = gpu->bus;
    info->device = 0;
    info->pciDeviceId = 0x233010de;
    /* NVML's form: an eight-digit domain, upper case. */
    const char *hex = "0123456789ABCDEF";
    char bus_id[] = "00000000:00:00.0";
    bus_id[9] = hex[gpu->bus >> 4];
    bus_id[10] = hex[gpu->bus & 15];
    strcpy(info->busId, bus_id);
    memcpy(info->busIdLegacy, bus_id + 4, sizeof(bus_id) - 4);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *info) {
    nvmlReturn_t r = check(device);
    if (r == NVML_SUCCESS)
        pci(device, info);
    return r;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    nvmlReturn_t r = check(device);
    if (r == NVML_SUCCESS)
        *current = *pending = 0;
    return r;
}

/* Link 0 is active and reaches the other GPU, link 1 is inactive, there is no link 2. */
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *active) {
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    if (link >= NVLINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    *active = link == 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *info) {
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    if (link != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    pci(&gpus[device->peer], info);
    return NVML_SUCCESS;
}

/* Both GPUs are in clique 7 of one NVLink fabric, registered by the fabric manager. */
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
} nvmlGpuFabricInfo_t;
#define NVML_GPU_FABRIC_STATE_COMPLETED 3

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    static const unsigned char cluster[16] = {0x4c, 0x2f, 0x8d, 0x1e, 0x00, 0x11, 0x42, 0x33,
                                              0x84, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb};
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    memcpy(info->clusterUuid, cluster, sizeof(cluster));
    info->status = NVML_SUCCESS;
    info->cliqueId = 7;
    info->state = NVML_GPU_FABRIC_STATE_COMPLETED;
    return NVML_SUCCESS;
}
