// A typed pointer kept in an autograd context for backward: a custom autograd
// function gets its collaborators (a communicator, the ZeRO engine's gatherer)
// as plain arguments of forward, which saves them here. The context's saved
// data holds IValues, which hold no raw pointers; a capsule around the typed
// pointer does, so no pointer travels as an integer.
//
//   static Tensor forward(AutogradContext* ctx, Tensor x, Comm* comm) {
//     ctx->saved_data["comm"] = autograd_handle(comm);
//     ...
//   static tensor_list backward(AutogradContext* ctx, tensor_list g) {
//     Comm& comm = *from_autograd_handle<Comm>(ctx->saved_data["comm"]);
//
// The pointee must outlive the graph (the trainer's communicators and engine
// do). One small allocation per call.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/custom_class.h>

namespace zlm::trainer {

template <class T>
struct AutogradHandle : torch::CustomClassHolder {
  explicit AutogradHandle(T* p) : ptr(p) {}
  T* ptr;
};

template <class T>
c10::IValue autograd_handle(T* p) {
  return c10::IValue::make_capsule(c10::make_intrusive<AutogradHandle<T>>(p));
}

template <class T>
T* from_autograd_handle(const c10::IValue& v) {
  return static_cast<AutogradHandle<T>*>(v.toCapsule().get())->ptr;
}

}  // namespace zlm::trainer
